package sandbox

import (
	"time"

	"github.com/cellvm/cellvm/cell"
)

// Images and workspaces as the contract names them. An image is a root
// file system sandboxes boot (Config.Image); a workspace a named volume
// that outlives them (Config.Workspace). Where they live on the host, and
// how they are built and kept, is the engine's (package sandbox/engine)
// and the image store's (package image/store).

// DefaultImage names the daemon's own image.
const DefaultImage = "default"

// ImageInfo describes an image.
type ImageInfo struct {
	Name      string    `json:"name"`
	SizeBytes int64     `json:"size_bytes"`
	BuiltAt   time.Time `json:"built_at"`
	// Python and Modules are from the image's manifest, when it has one:
	// the interpreter's version and the featured modules with theirs.
	Python  string   `json:"python,omitempty"`
	Modules []string `json:"modules,omitempty"`
	// Languages are the cell languages the image has, with the versions
	// of their programs: from its manifest (the default image and those
	// built on it) or found in it when it was imported or built. Cells in
	// another language are refused (ErrInvalid) naming these.
	Languages []cell.LanguageInfo `json:"languages,omitempty"`
	// Sandboxes counts the sandboxes that use it now.
	Sandboxes int `json:"sandboxes"`
	// Key, Apt and BuildSeconds are from the build's record (cellvm image
	// build), for images other than the default.
	Key          string   `json:"key,omitempty"`
	Apt          []string `json:"apt,omitempty"`
	BuildSeconds float64  `json:"build_seconds,omitempty"`
	// Tenant owns an image built or pulled through the API; "" for the
	// default image and the operator's, which every tenant sees.
	Tenant string `json:"tenant,omitempty"`
	// Source says how it was made (ImageSourceBuild, ImageSourcePull,
	// ImageSourceImport); "" for the default image.
	Source string `json:"source,omitempty"`
	// Ref is the reference pulled, Digest the OCI manifest's digest
	// (sha256:...) of a pulled or imported image; Base the image a
	// recipe built on.
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"`
	Base   string `json:"base,omitempty"`
	// Env, WorkingDir and User are the image's config, applied to its
	// cells and commands: an OCI image's own, changed by a recipe's.
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// ValidImageName reports whether name can name an image (the rule of
// workspace names: it names a directory on the host).
func ValidImageName(name string) bool { return ValidWorkspaceName(name) }

// WorkspaceInfo describes a workspace.
type WorkspaceInfo struct {
	Name string `json:"name"`
	// SizeBytes is the volume's size, the cap on what it can hold;
	// DiskBytes what it takes on the host's disk now.
	SizeBytes int64     `json:"size_bytes"`
	DiskBytes int64     `json:"disk_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Sandbox is the sandbox that holds it now, if any.
	Sandbox string `json:"sandbox,omitempty"`
	// Tenant owns it: workspace names are per tenant.
	Tenant string `json:"tenant,omitempty"`
}

// DefaultWorkspaceBytes is a workspace's size when the engine's option (serve --workspace-size)
// is zero.
const DefaultWorkspaceBytes = 2 << 30
