package imagecfg

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cellvm/cellvm/guestinit/celluser"
	"github.com/cellvm/cellvm/image/buildplan"
)

// Cells is how cells and commands run in a guest, decided from the
// image's config (see the package doc).
type Cells struct {
	// AsRoot: they keep root's credentials (the sandbox's root option).
	AsRoot bool
	// UID and GID are their credentials when not AsRoot.
	UID, GID int
	// ImageUser: UID is the image's own USER, not cellvm's cell user.
	ImageUser bool
	// Name and Home are the user's name and home directory.
	Name, Home string
	// Dir is their working directory.
	Dir string
	// Env is their environment (before the sandbox's own variables).
	Env []string
	// Notes say what of the image's config was not applied, and why.
	Notes []string
}

// Options are what Decide needs besides the image's config.
type Options struct {
	// Root is the guest's root directory ("/"; a temporary one in tests).
	Root string
	// AsRoot is the sandbox's root option.
	AsRoot bool
	// Defaults is the guest's own environment (PATH, locale, ...).
	Defaults []string
	// Workspace is the working directory of images without one.
	Workspace string
}

// Decide works out whom cells run as, where and with what environment.
// It changes nothing on disk (Prepare does).
func Decide(o Options, c buildplan.Config) Cells {
	cells := Cells{Dir: o.Workspace}
	if c.WorkingDir != "" {
		cells.Dir = c.WorkingDir
	}
	id := Identity{}
	switch {
	case o.AsRoot:
		cells.AsRoot, cells.Name, cells.Home = true, "root", "/root"
		id = Identity{Name: "root", Home: "/root", ImageHomeWins: true}
	default:
		cells.UID, cells.GID, cells.Name, cells.Home = celluser.UID, celluser.GID, celluser.Name, celluser.Home
		if c.User != "" {
			u, err := LookupUser(o.Root, c.User)
			switch {
			case err != nil:
				cells.Notes = append(cells.Notes, fmt.Sprintf("the image's user %q is not used (%v): cells run as cellvm's user %q", clip(c.User), err, celluser.Name))
			case u.Root():
				// Root, as the image's default, is cellvm's cell user.
			default:
				cells.UID, cells.GID, cells.ImageUser = u.UID, u.GID, true
				cells.Name, cells.Home = u.Name, u.Home
				if cells.Name == "" {
					cells.Name = strconv.Itoa(u.UID)
				}
				if cells.Home == "" {
					cells.Home = "/home/" + strconv.Itoa(u.UID)
				}
			}
		}
		id = Identity{Name: cells.Name, Home: cells.Home, ImageHomeWins: cells.ImageUser}
	}
	defaults := o.Defaults
	if !cells.AsRoot && !cells.ImageUser && isDir(filepath.Join(o.Root, matplotlibCache)) {
		// cellvm's own image has a shared, prebuilt font cache.
		defaults = append(defaults[:len(defaults):len(defaults)], "MPLCONFIGDIR="+matplotlibCache)
	}
	cells.Env = Env(defaults, c.Env, id)
	return cells
}

// matplotlibCache is cellvm's own image's matplotlib config and cache.
const matplotlibCache = "/var/cache/matplotlib"

// Prepare makes the directories the cells need under root: their working
// directory and, for the image's own user, the home directory and
// /workspace, owned by the user. What cannot be done is returned as notes;
// the cells then still start (a working directory that cannot be made is
// replaced by workspace).
func (c *Cells) Prepare(root, workspace string) {
	uid, gid := c.UID, c.GID
	if c.AsRoot {
		uid, gid = 0, 0
	}
	if c.ImageUser {
		if err := os.Lchown(filepath.Join(root, workspace), uid, gid); err != nil && !errors.Is(err, os.ErrNotExist) {
			c.Notes = append(c.Notes, fmt.Sprintf("hand %s to the image's user: %v", workspace, err))
		}
		if err := makeDir(root, c.Home, 0o750, uid, gid); err != nil {
			c.Notes = append(c.Notes, fmt.Sprintf("the image user's home: %v", err))
		}
	}
	if c.Dir == workspace {
		return // made and owned by PID 1 (celluser.Ensure)
	}
	full := filepath.Join(root, c.Dir)
	st, err := os.Stat(full)
	switch {
	case errors.Is(err, os.ErrNotExist):
		err = makeDir(root, c.Dir, 0o755, uid, gid)
	case err == nil && !st.IsDir():
		err = fmt.Errorf("%s is not a directory", c.Dir)
	case err == nil && !c.AsRoot && !c.ImageUser && !writableBy(st, uid, gid):
		// The image meant its code to run as root, which could write
		// here; the cell user is its stand-in. Only the directory itself
		// is handed over, not what is in it, and never a system one.
		if real, ok := resolveIn(root, full); ok && mayHandOver(real) {
			err = os.Lchown(filepath.Join(root, real), uid, gid)
		}
	}
	if err != nil {
		c.Notes = append(c.Notes, fmt.Sprintf("the image's working directory %s: %v; cells start in %s", c.Dir, err, workspace))
		c.Dir = workspace
	}
}

// resolveIn resolves the links of full, a path under root, and returns
// the result as a path in root ("/..."); not ok if it leads out of root.
func resolveIn(root, full string) (string, bool) {
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return "", false
	}
	rootReal, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(rootReal, real)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return path.Clean("/" + rel), true
}

// makeDir creates dir under root (its missing parents 0755, root's) and
// gives it to uid:gid; an existing one is left as it is.
func makeDir(root, dir string, mode os.FileMode, uid, gid int) error {
	full := filepath.Join(root, dir)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(full, mode); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	if err := os.Chmod(full, mode); err != nil { // past the umask
		return err
	}
	return os.Lchown(full, uid, gid)
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// writableBy reports whether uid:gid (no other groups) may create files
// in the directory st describes.
func writableBy(st os.FileInfo, uid, gid int) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	m := uint32(st.Mode().Perm())
	switch {
	case int(s.Uid) == uid:
		return m&0o300 == 0o300
	case int(s.Gid) == gid:
		return m&0o030 == 0o030
	}
	return m&0o003 == 0o003
}

// systemDirs are the top-level directories never handed to the cell
// user, nor anything under the first group of them.
var (
	systemTrees = []string{"/proc", "/sys", "/dev", "/etc", "/run", "/boot"}
	systemDirs  = []string{"/", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/var", "/tmp", "/home", "/root", "/opt", "/srv", "/mnt", "/media",
		"/usr/bin", "/usr/sbin", "/usr/lib", "/usr/lib64", "/usr/local", "/usr/local/bin", "/usr/local/lib", "/usr/share", "/var/lib", "/var/cache"}
)

// mayHandOver reports whether the directory dir (clean, absolute) may be
// given to the cell user.
func mayHandOver(dir string) bool {
	dir = path.Clean(dir)
	for _, t := range systemTrees {
		if dir == t || strings.HasPrefix(dir, t+"/") {
			return false
		}
	}
	for _, d := range systemDirs {
		if dir == d {
			return false
		}
	}
	return true
}
