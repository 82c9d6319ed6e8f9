package build

import (
	"fmt"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// The copy step: a file or a tree of the build's inputs copied into the
// image, as derive.sh's `tar | tar -C / --keep-directory-symlink
// --no-same-owner --no-overwrite-dir` did, but with every path of the
// image resolved in the image (Root): a directory of the tree goes
// through the image's link of that name (bin/x lands in /usr/bin of a
// merged-/usr image), a file or link replaces what is there (a link is
// replaced, never followed), the image's directories keep their owners
// and modes, and what is copied is owned by root with its modes kept.

// Bounds of a copy.
const (
	maxCopyEntries = 1 << 20
	maxCopyDepth   = 256
)

type copier struct {
	b       *builder
	entries int
	buf     []byte
}

func (b *builder) copyStep(s sandbox.RecipeStep) error {
	src, err := cleanName(buildplan.InputsDir + "/" + s.CopyFrom)
	if err != nil {
		return err
	}
	sfd, err := b.inputs.openat2(src, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return fmt.Errorf("copy_from %s is not among the build's files (%v)", clip(s.CopyFrom), err)
	}
	defer unix.Close(sfd)
	var st unix.Stat_t
	if err := unix.Fstat(sfd, &st); err != nil {
		return err
	}
	to := s.CopyTo
	if to == "" {
		to = "/"
	}
	dst, err := cleanName(to)
	if err != nil {
		return fmt.Errorf("copy_to %s: %w", clip(to), err)
	}
	c := &copier{b: b}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		dfd, err := b.root.openDir(dst, true)
		if err != nil {
			return fmt.Errorf("copy_to %s: %w", clip(to), err)
		}
		defer unix.Close(dfd)
		if err := c.tree(sfd, dfd, dst, 0); err != nil {
			return err
		}
	case unix.S_IFREG:
		// Into a directory (copy_to ending in "/" or one in the image),
		// else as copy_to itself.
		name := path.Base(s.CopyFrom)
		if dst != "." && !strings.HasSuffix(to, "/") {
			if fd, err := b.root.openDir(dst, false); err == nil {
				unix.Close(fd)
			} else {
				dst, name = path.Split(dst)
				dst = strings.TrimSuffix(dst, "/")
				if dst == "" {
					dst = "."
				}
			}
		}
		dfd, err := b.root.openDir(dst, true)
		if err != nil {
			return fmt.Errorf("copy_to %s: %w", clip(to), err)
		}
		defer unix.Close(dfd)
		if err := c.file(sfd, &st, dfd, name, joinRel(dst, name)); err != nil {
			return err
		}
		c.entries++
	default:
		return fmt.Errorf("copy_from %s is neither a file nor a directory", clip(s.CopyFrom))
	}
	b.p.Printf("files: %d entries", c.entries)
	return nil
}

// tree copies the directory sfd's entries into the image's directory dfd
// (rel, its path in the image).
func (c *copier) tree(sfd, dfd int, rel string, depth int) error {
	if depth > maxCopyDepth {
		return fmt.Errorf("copy: directories nested deeper than %d", maxCopyDepth)
	}
	names, err := readNames(sfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if c.entries++; c.entries > maxCopyEntries {
			return fmt.Errorf("copy: more than %d entries", maxCopyEntries)
		}
		st, ok, err := lstatAt(sfd, n)
		if err != nil || !ok {
			return fmt.Errorf("copy: %s: %v", n, err)
		}
		at := joinRel(rel, n)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := c.dir(sfd, n, &st, dfd, at, depth); err != nil {
				return err
			}
		case unix.S_IFREG:
			fd, err := unix.Openat(sfd, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
			if err != nil {
				return fmt.Errorf("copy: %s: %w", at, err)
			}
			err = c.file(fd, &st, dfd, n, at)
			unix.Close(fd)
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			target, err := readlinkAt(sfd, n)
			if err != nil {
				return fmt.Errorf("copy: %s: %w", at, err)
			}
			if err := clearFor(dfd, n, at); err != nil {
				return err
			}
			if err := unix.Symlinkat(target, dfd, n); err != nil {
				return fmt.Errorf("copy: /%s: %w", at, err)
			}
			unix.Fchownat(dfd, n, 0, 0, unix.AT_SYMLINK_NOFOLLOW)
			setTimes(dfd, n, &st)
		default:
			return fmt.Errorf("copy: %s is neither a file, a directory nor a link", at)
		}
	}
	return nil
}

// dir copies the directory n of sfd to n of dfd: through the image's
// directory or link to one there, else a new directory.
func (c *copier) dir(sfd int, n string, st *unix.Stat_t, dfd int, at string, depth int) error {
	cur, ok, err := lstatAt(dfd, n)
	if err != nil {
		return err
	}
	var child int
	switch {
	case ok && cur.Mode&unix.S_IFMT == unix.S_IFLNK:
		// --keep-directory-symlink: through the link, in the image.
		child, err = c.b.root.openDir(at, true)
		if err != nil {
			return fmt.Errorf("copy: /%s: %w", at, err)
		}
	case ok && cur.Mode&unix.S_IFMT == unix.S_IFDIR:
		// --no-overwrite-dir: the image's directory keeps its owner and mode.
		child, err = unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("copy: /%s: %w", at, err)
		}
	default:
		if ok {
			if err := removeAllAt(dfd, n); err != nil {
				return fmt.Errorf("copy: /%s: %w", at, err)
			}
		}
		if err := unix.Mkdirat(dfd, n, 0o700); err != nil {
			return fmt.Errorf("copy: /%s: %w", at, err)
		}
		child, err = unix.Openat(dfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("copy: /%s: %w", at, err)
		}
		unix.Fchown(child, 0, 0)
		unix.Fchmod(child, st.Mode&0o7777)
	}
	defer unix.Close(child)
	sub, err := unix.Openat(sfd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("copy: %s: %w", at, err)
	}
	defer unix.Close(sub)
	return c.tree(sub, child, at, depth+1)
}

// clearFor makes way for a new entry n in dfd: a file or link there is
// removed, an empty directory too; a directory with content is an error.
func clearFor(dfd int, n, at string) error {
	cur, ok, err := lstatAt(dfd, n)
	if err != nil || !ok {
		return err
	}
	if cur.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := unix.Unlinkat(dfd, n, unix.AT_REMOVEDIR); err != nil {
			return fmt.Errorf("copy: /%s is a directory in the image (%v): a file does not replace it", at, err)
		}
		return nil
	}
	return unix.Unlinkat(dfd, n, 0)
}

// file copies the open file sfd to n of dfd, owned by root, mode and
// modification time kept.
func (c *copier) file(sfd int, st *unix.Stat_t, dfd int, n, at string) error {
	if err := clearFor(dfd, n, at); err != nil {
		return err
	}
	fd, err := unix.Openat(dfd, n, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copy: /%s: %w", at, err)
	}
	defer unix.Close(fd)
	if c.buf == nil {
		c.buf = make([]byte, 1<<20)
	}
	for {
		m, err := unix.Read(sfd, c.buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("copy: reading %s: %w", at, err)
		}
		if m == 0 {
			break
		}
		if err := writeAll(fd, c.buf[:m]); err != nil {
			return fmt.Errorf("copy: /%s: %w", at, err)
		}
	}
	if err := unix.Fchown(fd, 0, 0); err != nil {
		return err
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return err
	}
	setTimes(dfd, n, st)
	return nil
}

func setTimes(dfd int, n string, st *unix.Stat_t) {
	ts := []unix.Timespec{st.Atim, st.Mtim}
	unix.UtimesNanoAt(dfd, n, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func osNewFile(fd int) *os.File { return os.NewFile(uintptr(fd), "") }
