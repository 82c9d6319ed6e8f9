// Package derive builds a named root image on top of a base image: Debian
// packages from a mirror, Python wheels from a directory or an index, and
// files, copied into a copy of the base and made into a new read-only
// ext4 with its own manifest. It is `cellvm image build`.
//
// Why a copy and a new ext4 rather than a layer: the guest mounts one
// read-only root and puts its own writable overlay on it, and a sandbox's
// snapshot caches that root's files in its memory. One file per image
// keeps the guest, the VMM and the jail as they are, and an image that
// never changes under the sandboxes that booted it.
//
// The steps (derive.sh, run as root) print their progress; the Go side
// checks every input first, keys the build by its inputs (the base's
// identity, the packages, the wheels' and files' contents, the
// requirements, the mirror and index), so an unchanged build is a cache
// hit in no time, builds in a work directory beside the images, and swaps
// the result into place in one rename. A failed build says which step
// failed and leaves the previous image as it was.
package derive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/image/store"
)

//go:embed derive.sh
var script []byte

// Limits on the inputs.
const (
	MaxPackages = 256
	// MaxInputBytes bounds the wheels and files a build copies in.
	MaxInputBytes = 4 << 30
	maxEntries    = 200_000
	maxReqBytes   = 1 << 20
)

// Spec is one build.
type Spec struct {
	// Name is the image's name: its directory under ImagesDir.
	Name string
	// ImagesDir holds the images (the daemon's STATE_DIR/images, or its
	// --images-dir).
	ImagesDir string
	// Base is the image built on (the daemon's default image).
	Base string
	// Apt are Debian packages (name or name=version) installed from
	// Mirror, or from the base's own sources.list when Mirror is "".
	Apt    []string
	Mirror string
	// PipWheels is a directory of wheels: every *.whl in it is installed,
	// and it is where requirements are looked for first.
	PipWheels string
	// Requirements is a pip requirements file; PipIndex, when set, is an
	// index its packages may come from (else only PipWheels).
	Requirements string
	PipIndex     string
	// Files is a directory copied onto the root (its layout is the
	// root's), owned by root, modes kept.
	Files string
}

// Result says what a build did.
type Result struct {
	Dir      string // the image's directory
	Key      string
	CacheHit bool // the image there was built from the same inputs
	Record   store.Record
}

// StepError is a failed step.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("image build: step %q failed: %v", e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

var (
	// Debian's package names, optionally =version (Debian policy 5.6.1,
	// 5.6.12); nothing that apt could read as an option.
	aptRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]{0,99}(=[A-Za-z0-9.+~:-]{1,100})?$`)
)

// check validates s and fills in absolute paths.
func (s *Spec) check() error {
	if !store.ValidName(s.Name) {
		return fmt.Errorf("image name %q: want 1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit, and not \"default\" (the daemon's own image)", clip(s.Name), store.MaxName)
	}
	if s.ImagesDir == "" {
		return errors.New("no images directory")
	}
	if len(s.Apt) > MaxPackages {
		return fmt.Errorf("%d Debian packages: at most %d", len(s.Apt), MaxPackages)
	}
	for _, p := range s.Apt {
		if !aptRE.MatchString(p) {
			return fmt.Errorf("--apt %q is not a Debian package name (lower case a-z, 0-9, '+', '-', '.', optionally =VERSION)", clip(p))
		}
	}
	for _, u := range []struct{ flag, v string }{{"--mirror", s.Mirror}, {"--pip-index", s.PipIndex}} {
		if u.v == "" {
			continue
		}
		p, err := url.Parse(u.v)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" || strings.ContainsAny(u.v, " \t\n\"'") {
			return fmt.Errorf("%s %q: want an http:// or https:// URL", u.flag, clip(u.v))
		}
	}
	if s.Mirror != "" && len(s.Apt) == 0 {
		return errors.New("--mirror without --apt: it is where Debian packages come from")
	}
	if s.PipIndex != "" && s.Requirements == "" && s.PipWheels == "" {
		return errors.New("--pip-index without --requirements or --pip-wheels")
	}
	var err error
	if s.Base, err = regularFile("base image", s.Base); err != nil {
		return err
	}
	if s.PipWheels != "" {
		if s.PipWheels, err = dir("--pip-wheels", s.PipWheels); err != nil {
			return err
		}
		whl, _ := filepath.Glob(filepath.Join(s.PipWheels, "*.whl"))
		if len(whl) == 0 && s.Requirements == "" {
			return fmt.Errorf("--pip-wheels %s holds no *.whl file (and no --requirements names what to install from it)", s.PipWheels)
		}
	}
	if s.Requirements != "" {
		if s.Requirements, err = regularFile("--requirements", s.Requirements); err != nil {
			return err
		}
		if fi, _ := os.Stat(s.Requirements); fi.Size() > maxReqBytes {
			return fmt.Errorf("--requirements %s is %d bytes, more than %d", s.Requirements, fi.Size(), maxReqBytes)
		}
		if s.PipWheels == "" && s.PipIndex == "" {
			return fmt.Errorf("--requirements %s: pip needs somewhere to find them: --pip-wheels DIR, --pip-index URL, or both", s.Requirements)
		}
	}
	if s.Files != "" {
		if s.Files, err = dir("--files", s.Files); err != nil {
			return err
		}
	}
	if len(s.Apt) == 0 && s.PipWheels == "" && s.Requirements == "" && s.Files == "" {
		return errors.New("nothing to build: give --apt, --pip-wheels, --requirements or --files")
	}
	return nil
}

func regularFile(what, p string) (string, error) { return statPath(what, p, false) }

func dir(what, p string) (string, error) { return statPath(what, p, true) }

// statPath makes p absolute and checks it is a directory (wantDir) or a
// regular file.
func statPath(what, p string, wantDir bool) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, p, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	switch {
	case wantDir && !fi.IsDir():
		return "", fmt.Errorf("%s %s is not a directory", what, abs)
	case !wantDir && !fi.Mode().IsRegular():
		return "", fmt.Errorf("%s %s is not a regular file", what, abs)
	}
	return abs, nil
}

// treeDigest hashes a directory's entries (type, mode, path, link target,
// content), refusing what an image must not get from a user's directory
// (devices, sockets, pipes) and bounding its size.
func treeDigest(what, root string, h io.Writer) error {
	var total int64
	entries := 0
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		rel, _ := filepath.Rel(root, p)
		if entries++; entries > maxEntries {
			return fmt.Errorf("%s %s has more than %d entries", what, root, maxEntries)
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			fmt.Fprintf(h, "d %o %q\n", mode.Perm()|mode&(fs.ModeSticky|fs.ModeSetgid|fs.ModeSetuid), rel)
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			fmt.Fprintf(h, "l %q %q\n", rel, target)
		case mode.IsRegular():
			if total += fi.Size(); total > MaxInputBytes {
				return fmt.Errorf("%s %s holds more than %d MiB", what, root, MaxInputBytes>>20)
			}
			f, err := os.Open(p)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			fh := sha256.New()
			_, err = io.Copy(fh, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: reading %s: %w", what, p, err)
			}
			fmt.Fprintf(h, "f %o %q %x\n", mode.Perm()|mode&(fs.ModeSetgid|fs.ModeSetuid), rel, fh.Sum(nil))
		default:
			return fmt.Errorf("%s: %s is a %s: only files, directories and symbolic links go into an image", what, p, mode.Type())
		}
		return nil
	})
}

// Key is the build's cache key over its inputs (after check).
func (s *Spec) key(baseUUID string, baseSize int64) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "cellvm image build 1\nscript %x\ncollect %x\nmodules %x\n",
		sha256.Sum256(script), sha256.Sum256(manifest.CollectScript()), sha256.Sum256(manifest.ModulesList()))
	fmt.Fprintf(h, "name %q\nbase %s %d\nmirror %q\nindex %q\n", s.Name, baseUUID, baseSize, s.Mirror, s.PipIndex)
	apt := append([]string(nil), s.Apt...)
	sort.Strings(apt)
	fmt.Fprintf(h, "apt %q\n", apt)
	if s.PipWheels != "" {
		fmt.Fprintf(h, "wheels\n")
		if err := treeDigest("--pip-wheels", s.PipWheels, h); err != nil {
			return "", err
		}
	}
	if s.Requirements != "" {
		b, err := os.ReadFile(s.Requirements)
		if err != nil {
			return "", fmt.Errorf("--requirements: %w", err)
		}
		fmt.Fprintf(h, "requirements %x\n", sha256.Sum256(b))
	}
	if s.Files != "" {
		fmt.Fprintf(h, "files\n")
		if err := treeDigest("--files", s.Files, h); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Build builds s.Name, writing progress lines to progress. It needs root
// (mounts, chroot).
func Build(ctx context.Context, s Spec, progress io.Writer) (Result, error) {
	if err := s.check(); err != nil {
		return Result{}, err
	}
	uuid, err := store.FSUUID(s.Base)
	if err != nil {
		return Result{}, err
	}
	bfi, err := os.Stat(s.Base)
	if err != nil {
		return Result{}, err
	}
	key, err := s.key(uuid, bfi.Size())
	if err != nil {
		return Result{}, err
	}
	dst := filepath.Join(s.ImagesDir, s.Name)
	res := Result{Dir: dst, Key: key}
	if rec, err := store.ReadRecord(dst); err == nil && rec.Key == key {
		if fi, err := os.Stat(filepath.Join(dst, store.ImageFile)); err == nil && fi.Mode().IsRegular() {
			res.CacheHit, res.Record = true, rec
			fmt.Fprintf(progress, "image %s is up to date: built %s from the same inputs (key %s)\n", s.Name, rec.BuiltAt.Local().Format(time.DateTime), key[:12])
			return res, nil
		}
	}
	if os.Geteuid() != 0 {
		return res, errors.New("image build needs root (it loop-mounts the base and runs apt and pip chrooted into a copy)")
	}
	for _, tool := range []string{"bash", "unshare", "mount", "chroot", "cp", "mkfs.ext4", "e2fsck"} {
		if _, err := exec.LookPath(tool); err != nil {
			return res, fmt.Errorf("image build needs %s: %w (run scripts/install-deps.sh)", tool, err)
		}
	}
	if err := os.MkdirAll(s.ImagesDir, 0o755); err != nil {
		return res, fmt.Errorf("images directory: %w", err)
	}
	// One build of a name at a time.
	lock, err := os.OpenFile(filepath.Join(s.ImagesDir, "."+s.Name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return res, fmt.Errorf("build lock: %w", err)
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return res, fmt.Errorf("another build of image %s is running (lock %s)", s.Name, lock.Name())
	}
	work, err := os.MkdirTemp(s.ImagesDir, ".build-"+s.Name+"-")
	if err != nil {
		return res, fmt.Errorf("work directory: %w", err)
	}
	defer os.RemoveAll(work)
	for name, b := range map[string][]byte{"derive.sh": script, "collect.py": manifest.CollectScript(), "modules.txt": manifest.ModulesList()} {
		if err := os.WriteFile(filepath.Join(work, name), b, 0o644); err != nil {
			return res, err
		}
	}
	out := filepath.Join(work, "image")
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(work, "derive.sh"))
	cmd.Env = append(os.Environ(),
		"DERIVE_BASE="+s.Base, "DERIVE_WORK="+work, "DERIVE_OUT="+filepath.Join(out, store.ImageFile),
		"DERIVE_KEY="+key, "DERIVE_NAME="+s.Name,
		"DERIVE_COLLECT="+filepath.Join(work, "collect.py"), "DERIVE_MODULES="+filepath.Join(work, "modules.txt"),
		"DERIVE_APT="+strings.Join(s.Apt, " "), "DERIVE_MIRROR="+s.Mirror, "DERIVE_WHEELS="+s.PipWheels,
		"DERIVE_REQUIREMENTS="+s.Requirements, "DERIVE_PIP_INDEX="+s.PipIndex, "DERIVE_FILES="+s.Files)
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("image build: %w", err)
	}
	step, failed, tail := "start", "", newTail(20)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "step "):
				step = strings.Fields(line)[1]
				fmt.Fprintf(progress, "[image %s %s] %s\n", s.Name, time.Now().Format("15:04:05"), line)
			case strings.HasPrefix(line, "failed: "):
				failed = strings.TrimPrefix(line, "failed: ")
			default:
				tail.add(line)
				fmt.Fprintf(progress, "  %s\n", line)
			}
		}
		io.Copy(io.Discard, pr)
	}()
	werr := cmd.Wait()
	pw.Close()
	<-copied
	if werr != nil {
		if failed == "" {
			failed = step
		}
		if ctx.Err() != nil {
			werr = fmt.Errorf("%w (%v)", ctx.Err(), werr)
		}
		return res, &StepError{Step: failed, Err: fmt.Errorf("%v; the last output:\n%s\nthe image %s there was before is unchanged", werr, tail.String(), s.Name)}
	}
	fi, err := os.Stat(filepath.Join(out, store.ImageFile))
	if err != nil {
		return res, &StepError{Step: "mkfs", Err: err}
	}
	res.Record = store.Record{Key: key, Name: s.Name, Base: s.Base, BaseUUID: uuid, Apt: s.Apt, Mirror: s.Mirror,
		PipWheels: s.PipWheels, Requirements: s.Requirements, PipIndex: s.PipIndex, Files: s.Files,
		BuiltAt: time.Now().UTC(), Seconds: time.Since(start).Seconds(), SizeBytes: fi.Size()}
	b, _ := json.MarshalIndent(res.Record, "", "  ")
	if err := os.WriteFile(filepath.Join(out, store.BuildFile), append(b, '\n'), 0o644); err != nil {
		return res, err
	}
	if err := os.Chmod(out, 0o755); err != nil {
		return res, err
	}
	if err := store.Install(out, dst); err != nil {
		return res, err
	}
	return res, nil
}

// tail keeps the last lines of the build's output for its error.
type tail struct {
	lines []string
	max   int
}

func newTail(n int) *tail { return &tail{max: n} }

func (t *tail) add(l string) {
	if len(l) > 500 {
		l = l[:500] + "..."
	}
	t.lines = append(t.lines, l)
	if len(t.lines) > t.max {
		t.lines = t.lines[1:]
	}
}

func (t *tail) String() string {
	var b bytes.Buffer
	for _, l := range t.lines {
		b.WriteString("  " + l + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
