package build

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Root is a directory tree the builder writes into: the image being
// built, or the directory of a build's small inputs. Every path in it is
// resolved by the kernel with openat2(RESOLVE_IN_ROOT): a symbolic link,
// absolute or full of "..", resolves as if the tree were "/", so a link
// in an image (opt/x -> /tmp/victim) leads to ROOT/tmp/victim, never to
// the builder's own /tmp. The final component of a path is then acted on
// with the *at system calls relative to its resolved parent, without
// following it. Nothing else in the builder touches the tree by path.
type Root struct {
	fd   int
	path string // for messages only
	// resolve are the openat2 resolve flags (rootResolve, or without
	// RESOLVE_NO_XDEV where mounts inside must be crossed).
	resolve uint64
}

// rootResolve: in the root, no /proc magic links, no crossing into
// another file system (nothing is mounted inside while the builder writes).
const rootResolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Bounds on names.
const (
	maxPathLen = 4096
	maxLinks   = 40 // symbolic links followed while creating a path, as the kernel's own
)

// OpenRoot opens dir as a Root.
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", dir, err)
	}
	return &Root{fd: fd, path: dir, resolve: rootResolve}, nil
}

// Close closes the root's descriptor.
func (r *Root) Close() error {
	if r.fd < 0 {
		return nil
	}
	err := unix.Close(r.fd)
	r.fd = -1
	return err
}

// cleanName turns an archive's or a step's path into a path relative to
// the root: a leading "/" or "./" is dropped (absolute names are read
// inside the root, as tar does), and a name that climbs out with ".." is
// refused. "." is the root itself.
func cleanName(name string) (string, error) {
	if len(name) > maxPathLen {
		return "", fmt.Errorf("name of %d bytes, more than %d", len(name), maxPathLen)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name holds a NUL byte")
	}
	abs := strings.HasPrefix(name, "/")
	c := path.Clean(name)
	if abs {
		c = strings.TrimLeft(c, "/")
		if c == "" {
			c = "."
		}
	}
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("name %q climbs out of the root with \"..\"", clip(name))
	}
	return c, nil
}

// openat2 resolves p (relative, may hold links and "..") in the root.
func (r *Root) openat2(p string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: r.resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(r.fd, p, how)
		// EAGAIN: a concurrent rename in the tree; the kernel asks for a retry.
		if err == unix.EAGAIN && i < 8 {
			continue
		}
		return fd, err
	}
}

// openDir opens the directory rel (cleaned, relative) of the root. With
// create, missing directories are made (mode 0755, owned by the builder):
// through a dangling symbolic link too, whose target is then made inside
// the root, as `mkdir -p` in a chroot of the tree would.
func (r *Root) openDir(rel string, create bool) (int, error) {
	want := rel
	for links, rounds := 0, 0; ; rounds++ {
		if rounds > maxPathLen {
			return -1, fmt.Errorf("directory %s in %s: no end to making it", clip(want), r.path)
		}
		fd, err := r.openat2(rel, unix.O_RDONLY|unix.O_DIRECTORY)
		if err == nil {
			return fd, nil
		}
		if err != unix.ENOENT || !create {
			return -1, fmt.Errorf("directory %s in %s: %w", clip(want), r.path, err)
		}
		comps := splitPath(rel)
		// The first component that does not resolve: it is missing, or it
		// is a link whose target is.
		i := 0
		for ; i < len(comps); i++ {
			cfd, err := r.openat2(strings.Join(comps[:i+1], "/"), unix.O_PATH)
			if err == unix.ENOENT {
				break
			}
			if err != nil {
				return -1, fmt.Errorf("directory %s in %s: %w", clip(want), r.path, err)
			}
			unix.Close(cfd)
		}
		if i == len(comps) {
			continue // made meanwhile; resolve again
		}
		parent := "."
		if i > 0 {
			parent = strings.Join(comps[:i], "/")
		}
		pfd, err := r.openat2(parent, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return -1, fmt.Errorf("directory %s in %s: %w", clip(want), r.path, err)
		}
		target, lerr := readlinkAt(pfd, comps[i])
		switch {
		case lerr == nil:
			// A dangling link: go on through its target, resolved where
			// the link is (the kernel reads "..", and "/" is the root).
			if links++; links > maxLinks {
				unix.Close(pfd)
				return -1, fmt.Errorf("directory %s in %s: %w", clip(want), r.path, unix.ELOOP)
			}
			rest := strings.Join(comps[i+1:], "/")
			if strings.HasPrefix(target, "/") {
				rel = joinRel(strings.TrimLeft(target, "/"), rest)
			} else {
				rel = joinRel(joinRel(strings.Join(comps[:i], "/"), target), rest)
			}
			if len(rel) > maxPathLen {
				unix.Close(pfd)
				return -1, fmt.Errorf("directory %s in %s: %w", clip(want), r.path, unix.ENAMETOOLONG)
			}
		case lerr == unix.ENOENT:
			if err := unix.Mkdirat(pfd, comps[i], 0o755); err != nil && err != unix.EEXIST {
				unix.Close(pfd)
				return -1, fmt.Errorf("making directory %s in %s: %w", clip(want), r.path, err)
			}
		default:
			unix.Close(pfd)
			return -1, fmt.Errorf("directory %s in %s: %s is not a directory (%v)", clip(want), r.path, comps[i], lerr)
		}
		unix.Close(pfd)
	}
}

// parent resolves name's directory (creating it with create) and returns
// it with name's last component. name must not be the root itself.
func (r *Root) parent(name string, create bool) (int, string, error) {
	if name == "." || name == "" {
		return -1, "", errors.New("the root has no parent")
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	fd, err := r.openDir(dir, create)
	return fd, base, err
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

func joinRel(a, b string) string {
	switch {
	case a == "" || a == ".":
		return b
	case b == "":
		return a
	}
	return a + "/" + b
}

// readlinkAt reads the link name in dir; EINVAL when it is no link,
// ENOENT when it is not there.
func readlinkAt(dir int, name string) (string, error) {
	buf := make([]byte, maxPathLen+1)
	n, err := unix.Readlinkat(dir, name, buf)
	if err != nil {
		return "", err
	}
	if n > maxPathLen {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// lstatAt is fstatat without following name; ok is false when name is
// not there.
func lstatAt(dir int, name string) (st unix.Stat_t, ok bool, err error) {
	err = unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return st, false, nil
	}
	return st, err == nil, err
}

// removeAllAt removes name in dir and, if it is a directory, everything
// in it, never following a link: a link is removed, not what it points to.
func removeAllAt(dir int, name string) error {
	return removeAllDepth(dir, name, 0)
}

const maxRemoveDepth = 2048

func removeAllDepth(dir int, name string, depth int) error {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return fmt.Errorf("removing %q: not a name", name)
	}
	st, ok, err := lstatAt(dir, name)
	if !ok {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dir, name, 0); err != nil && err != unix.ENOENT {
			return fmt.Errorf("removing %s: %w", name, err)
		}
		return nil
	}
	if depth > maxRemoveDepth {
		return fmt.Errorf("removing %s: directories nested deeper than %d", name, maxRemoveDepth)
	}
	for pass := 0; pass < 4; pass++ {
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("removing %s: %w", name, err)
		}
		if err := emptyDir(fd, depth, nil); err != nil {
			unix.Close(fd)
			return fmt.Errorf("removing %s/%w", name, err)
		}
		unix.Close(fd)
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.ENOTEMPTY {
			return fmt.Errorf("removing %s: %w", name, err)
		}
	}
	return fmt.Errorf("removing %s: %w", name, unix.ENOTEMPTY)
}

// emptyDir removes every entry of the directory fd (keep may spare some).
func emptyDir(fd int, depth int, keep func(string) bool) error {
	f := os.NewFile(uintptr(dupFd(fd)), "dir")
	if f == nil {
		return errors.New("dup failed")
	}
	defer f.Close()
	for {
		names, err := f.Readdirnames(1024)
		for _, n := range names {
			if keep != nil && keep(n) {
				continue
			}
			if err := removeAllDepth(fd, n, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func dupFd(fd int) int {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return n
}

// procPath names name in the directory fd through /proc, for the calls
// that have no *at form (lsetxattr): the parent is the fd's directory,
// the last component is not followed by the l-calls.
func procPath(dirfd int, name string) string {
	return "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
