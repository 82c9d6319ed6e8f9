package sandbox

import (
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Image requests: how a caller asks for a new image (Manager.CreateImage).
// Every image is made by a builder microVM (package image and the
// engine's builder): a pull or an import applies an OCI image's layers
// inside it, and a recipe runs its steps inside it on a base image. The
// host fetches, checks digests and sizes, and hands the builder inputs on
// a read-only disk; it never unpacks, mounts or runs what it was given.

// Where an image came from (ImageInfo.Source).
const (
	ImageSourceBuild  = "build"
	ImageSourcePull   = "pull"
	ImageSourceImport = "import"
)

// Bounds of an image request.
const (
	MaxImageRef      = 512
	MaxRecipeSteps   = 256
	MaxRunBytes      = 64 << 10
	MaxImageEnv      = 256
	MaxImageEnvBytes = 64 << 10
	// DefaultImageBuildTimeout is a build's, pull's or import's deadline
	// when the request gives none.
	DefaultImageBuildTimeout = 30 * time.Minute
)

// ImageRequest asks for a new image: exactly one of Pull, Import and
// Recipe.
type ImageRequest struct {
	// Name is the new image's name (ValidImageName, not "default").
	Name string `json:"name"`
	// Tenant owns the image ("" reads as DefaultTenant). A front end
	// serving tenants sets it from the caller, whatever the request said.
	Tenant string `json:"tenant,omitempty"`
	// Replace allows replacing an image of that name; without it a taken
	// name is ErrBusy.
	Replace bool `json:"replace,omitempty"`

	// Pull is an OCI reference (registry/repo:tag or @sha256:...).
	Pull string `json:"pull,omitempty"`
	// Platform selects from a multi-platform index (default linux/amd64,
	// the only one the guest runs).
	Platform string `json:"platform,omitempty"`
	// Insecure allows a registry over plain HTTP or with a certificate
	// that does not verify.
	Insecure bool `json:"insecure,omitempty"`
	// RegistryToken is a bearer token for the registry; it is never
	// logged, recorded or shown.
	RegistryToken string `json:"registry_token,omitempty"`

	// Import makes the image from Archive: a `docker save` tarball or an
	// OCI image layout as a tar archive.
	Import bool `json:"import,omitempty"`

	// Recipe builds on a base image; its files (wheels, requirements,
	// trees to copy) come in Archive, a tar whose paths the steps name.
	Recipe *ImageRecipe `json:"recipe,omitempty"`

	// Archive is the import's archive or the recipe's inputs; not part
	// of the JSON form (the API takes it as the request body).
	Archive io.Reader `json:"-"`

	// Timeout bounds the whole request (fetch and build); zero means
	// DefaultImageBuildTimeout.
	Timeout time.Duration `json:"-"`
}

// ImageRecipe is a build on a base image: its steps run in order inside
// the builder VM, as root in a chroot of the new image.
type ImageRecipe struct {
	// Base is the image built on: "" or "default" for the daemon's own,
	// or any image the caller sees (built, pulled or imported).
	Base  string       `json:"base,omitempty"`
	Steps []RecipeStep `json:"steps"`
}

// RecipeStep is one step of a recipe: exactly one of its groups is set.
// Paths of inputs (PipWheels, Requirements, CopyFrom) are paths in the
// request's Archive.
type RecipeStep struct {
	// Apt installs Debian packages (name or name=version) from Mirror,
	// or from the image's own sources when Mirror is "".
	Apt    []string `json:"apt,omitempty"`
	Mirror string   `json:"mirror,omitempty"`

	// Pip installs wheels (every *.whl of the archive directory
	// PipWheels) and a requirements file (Requirements), binary wheels
	// only, from PipWheels and, when set, PipIndex.
	PipWheels    string `json:"pip_wheels,omitempty"`
	Requirements string `json:"requirements,omitempty"`
	PipIndex     string `json:"pip_index,omitempty"`

	// CopyFrom copies the archive's file or directory CopyFrom to CopyTo
	// ("/" when empty) in the image, owned by root, modes kept; links
	// resolve inside the image.
	CopyFrom string `json:"copy_from,omitempty"`
	CopyTo   string `json:"copy_to,omitempty"`

	// Run runs a shell command (sh -c) in the image.
	Run string `json:"run,omitempty"`

	// Env (KEY=VALUE), WorkingDir and User change the image's config,
	// as Dockerfile's ENV, WORKDIR and USER do.
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// Kind names the step's group: apt, pip, copy, run or config; "" when
// none or more than one is set.
func (s RecipeStep) Kind() string {
	var kinds []string
	if len(s.Apt) > 0 || s.Mirror != "" {
		kinds = append(kinds, "apt")
	}
	if s.PipWheels != "" || s.Requirements != "" || s.PipIndex != "" {
		kinds = append(kinds, "pip")
	}
	if s.CopyFrom != "" || s.CopyTo != "" {
		kinds = append(kinds, "copy")
	}
	if s.Run != "" {
		kinds = append(kinds, "run")
	}
	if len(s.Env) > 0 || s.WorkingDir != "" || s.User != "" {
		kinds = append(kinds, "config")
	}
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

// The validators' patterns are compiled on first use: a counted
// repetition compiles to that many copies of its class, and compiled at
// init these three cost every process that links this package (every
// cellvm command) about 2 ms and 360 KB, ten times that under emulation.
var (
	// Debian's package names, optionally =version (Debian policy 5.6.1,
	// 5.6.12); nothing that apt could read as an option.
	aptNameRE = lazyRE(`^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+~:-]{1,100})?$`)
	envKeyRE  = lazyRE(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	// A user as Docker's USER takes it: name or uid, optionally :group.
	userRE = lazyRE(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$`)
)

// lazyRE returns expr's regexp, compiled by the first call.
func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// ValidAptName reports whether p is a Debian package name, optionally
// with =VERSION.
func ValidAptName(p string) bool { return aptNameRE().MatchString(p) }

// CheckImageEnv checks a list of KEY=VALUE entries.
func CheckImageEnv(env []string) error {
	if len(env) > MaxImageEnv {
		return fmt.Errorf("%w: env has %d entries, at most %d", ErrInvalid, len(env), MaxImageEnv)
	}
	total := 0
	for _, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || !envKeyRE().MatchString(k) {
			return fmt.Errorf("%w: env entry %q: want KEY=VALUE with KEY of A-Z, a-z, 0-9 and '_'", ErrInvalid, clip(e, 64))
		}
		if strings.ContainsAny(e, "\x00\n") {
			return fmt.Errorf("%w: env entry %q holds a NUL or a newline", ErrInvalid, clip(e, 64))
		}
		total += len(e)
	}
	if total > MaxImageEnvBytes {
		return fmt.Errorf("%w: env is %d bytes, at most %d", ErrInvalid, total, MaxImageEnvBytes)
	}
	return nil
}

// ValidImageUser reports whether u can be an image's USER.
func ValidImageUser(u string) bool { return userRE().MatchString(u) }

// checkArchivePath checks a path into the request's archive.
func checkArchivePath(what, p string) error {
	if len(p) > 1024 || strings.IndexByte(p, 0) >= 0 || strings.HasPrefix(p, "/") {
		return fmt.Errorf("%w: %s %q: want a relative path in the request's archive", ErrInvalid, what, clip(p, 64))
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return fmt.Errorf("%w: %s %q contains \"..\"", ErrInvalid, what, clip(p, 64))
		}
	}
	return nil
}

func checkHTTPURL(what, v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(v, " \t\n\"'") || len(v) > 1024 {
		return fmt.Errorf("%w: %s %q: want an http:// or https:// URL", ErrInvalid, what, clip(v, 64))
	}
	return nil
}

// Validate checks the request's own bounds (not whether names exist).
func (r ImageRequest) Validate() error {
	if !ValidImageName(r.Name) || r.Name == DefaultImage {
		return fmt.Errorf("%w: image name %q: want 1 to %d of a-z, 0-9, '-', '_' and '.', starting with a letter or digit, and not %q (the daemon's own image)", ErrInvalid, clip(r.Name, 64), MaxWorkspaceName, DefaultImage)
	}
	if r.Tenant != "" {
		if err := CheckTenantName(r.Tenant); err != nil {
			return err
		}
	}
	n := 0
	if r.Pull != "" {
		n++
	}
	if r.Import {
		n++
	}
	if r.Recipe != nil {
		n++
	}
	if n != 1 {
		return fmt.Errorf("%w: an image request takes exactly one of pull (an OCI reference), import (an archive) and recipe", ErrInvalid)
	}
	if r.Timeout < 0 {
		return fmt.Errorf("%w: negative timeout", ErrInvalid)
	}
	if len(r.Pull) > MaxImageRef || strings.ContainsAny(r.Pull, " \t\n\x00") {
		return fmt.Errorf("%w: pull %q is not an image reference", ErrInvalid, clip(r.Pull, 64))
	}
	if len(r.RegistryToken) > 16<<10 || strings.ContainsAny(r.RegistryToken, "\r\n\x00") {
		return fmt.Errorf("%w: registry_token is not a bearer token", ErrInvalid)
	}
	if r.Platform != "" && r.Platform != "linux/amd64" {
		return fmt.Errorf("%w: platform %q: the guest runs linux/amd64 only", ErrInvalid, clip(r.Platform, 64))
	}
	if r.Import && r.Archive == nil {
		return fmt.Errorf("%w: an import needs its archive (a docker save tarball or an OCI layout tar)", ErrInvalid)
	}
	if r.Recipe != nil {
		return r.Recipe.Validate()
	}
	return nil
}

// Validate checks the recipe's steps.
func (rc ImageRecipe) Validate() error {
	if rc.Base != "" && !ValidImageName(rc.Base) {
		return fmt.Errorf("%w: base image %q is not an image name", ErrInvalid, clip(rc.Base, 64))
	}
	if len(rc.Steps) == 0 {
		return fmt.Errorf("%w: nothing to build: the recipe has no steps", ErrInvalid)
	}
	return rc.ValidateSteps()
}

// ValidateSteps checks the steps only (an empty list is valid).
func (rc ImageRecipe) ValidateSteps() error {
	if len(rc.Steps) > MaxRecipeSteps {
		return fmt.Errorf("%w: the recipe has %d steps, at most %d", ErrInvalid, len(rc.Steps), MaxRecipeSteps)
	}
	for i, s := range rc.Steps {
		if err := s.validate(); err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	return nil
}

func (s RecipeStep) validate() error {
	switch s.Kind() {
	case "apt":
		if len(s.Apt) == 0 {
			return fmt.Errorf("%w: a mirror without packages", ErrInvalid)
		}
		if len(s.Apt) > 256 {
			return fmt.Errorf("%w: %d Debian packages, at most 256", ErrInvalid, len(s.Apt))
		}
		for _, p := range s.Apt {
			if !ValidAptName(p) {
				return fmt.Errorf("%w: %q is not a Debian package name (lower case a-z, 0-9, '+', '-', '.', optionally =VERSION)", ErrInvalid, clip(p, 64))
			}
		}
		if s.Mirror != "" {
			return checkHTTPURL("mirror", s.Mirror)
		}
	case "pip":
		if s.PipWheels == "" && s.Requirements == "" {
			return fmt.Errorf("%w: a pip index without wheels or requirements", ErrInvalid)
		}
		if s.PipWheels != "" {
			if err := checkArchivePath("pip_wheels", s.PipWheels); err != nil {
				return err
			}
		}
		if s.Requirements != "" {
			if err := checkArchivePath("requirements", s.Requirements); err != nil {
				return err
			}
			if s.PipWheels == "" && s.PipIndex == "" {
				return fmt.Errorf("%w: requirements need somewhere to find them: pip_wheels, pip_index or both", ErrInvalid)
			}
		}
		if s.PipIndex != "" {
			return checkHTTPURL("pip_index", s.PipIndex)
		}
	case "copy":
		if s.CopyFrom == "" {
			return fmt.Errorf("%w: copy_to without copy_from", ErrInvalid)
		}
		if err := checkArchivePath("copy_from", s.CopyFrom); err != nil {
			return err
		}
		if s.CopyTo != "" && (!strings.HasPrefix(s.CopyTo, "/") || len(s.CopyTo) > 1024 || strings.IndexByte(s.CopyTo, 0) >= 0) {
			return fmt.Errorf("%w: copy_to %q: want an absolute path in the image", ErrInvalid, clip(s.CopyTo, 64))
		}
	case "run":
		if len(s.Run) > MaxRunBytes || strings.IndexByte(s.Run, 0) >= 0 {
			return fmt.Errorf("%w: run is %d bytes (at most %d) or holds a NUL", ErrInvalid, len(s.Run), MaxRunBytes)
		}
	case "config":
		if err := CheckImageEnv(s.Env); err != nil {
			return err
		}
		if s.WorkingDir != "" && (!strings.HasPrefix(s.WorkingDir, "/") || len(s.WorkingDir) > 1024 || strings.ContainsAny(s.WorkingDir, "\x00\n")) {
			return fmt.Errorf("%w: working_dir %q: want an absolute path", ErrInvalid, clip(s.WorkingDir, 64))
		}
		if s.User != "" && !ValidImageUser(s.User) {
			return fmt.Errorf("%w: user %q: want a name or uid, optionally :group", ErrInvalid, clip(s.User, 64))
		}
	default:
		return fmt.Errorf("%w: a step sets exactly one of apt, pip (pip_wheels, requirements, pip_index), copy_from, run, and env/working_dir/user", ErrInvalid)
	}
	return nil
}

// ImageEvent is a step of an image's making, for progress: a step's
// start (Step and no Message), a line of its output (Message), or bytes
// fetched (Done of Total, Total 0 when unknown).
type ImageEvent struct {
	Step    string `json:"step"`
	Message string `json:"message,omitempty"`
	Done    int64  `json:"done,omitempty"`
	Total   int64  `json:"total,omitempty"`
}

// Steps of an image's making, as ImageEvent.Step and as a failed step's
// name in errors.
const (
	ImageStepFetch    = "fetch"    // pull: manifest, config and layers from the registry
	ImageStepRead     = "read"     // import: the archive read and checked
	ImageStepBoot     = "boot"     // the builder VM starts
	ImageStepExtract  = "extract"  // the base copied, or the layers applied
	ImageStepApt      = "apt"      // apt-get install
	ImageStepPip      = "pip"      // pip install
	ImageStepFiles    = "files"    // files copied
	ImageStepRun      = "run"      // a RUN step
	ImageStepManifest = "manifest" // what the image holds recorded
	ImageStepMkfs     = "mkfs"     // the file system finished and checked
	ImageStepInstall  = "install"  // the host checks and installs it
	ImageStepDone     = "done"
)

// ImageStepError is a failed step of an image's making: it wraps
// ErrBuildFailed (or the cause, for a fetch), naming the step and
// carrying the end of its output.
type ImageStepError struct {
	Step string
	// Tail is the end of the step's output, at most a few KiB.
	Tail string
	Err  error
}

func (e *ImageStepError) Error() string {
	msg := fmt.Sprintf("image step %q failed: %v", e.Step, e.Err)
	if e.Tail != "" {
		msg += "; the last output:\n" + e.Tail
	}
	return msg
}

func (e *ImageStepError) Unwrap() error { return e.Err }
