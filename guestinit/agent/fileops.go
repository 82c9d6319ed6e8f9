package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// File operations of OpFile: each runs with the credentials of the
// cells' user (FilePolicy.Owner) unless the host asks for root, which it
// does only for a sandbox whose cells run as root. So a listing shows
// only what `ls` as that user would, and a rename or remove fails where
// the user's would.

var errExists = errors.New("exists and is not a directory")

func (ss *session) fileOp(req *proto.Request) bool {
	op := req.File
	switch op.Kind {
	case proto.FileWatch:
		return ss.watchDir(op)
	case proto.FileDial:
		return ss.dialPort(op)
	}
	owner := ss.s.cfg.Files.Owner
	if op.Root {
		owner = nil
	}
	var reply proto.FileReply
	err := owner.asOwner(func() error {
		var err error
		reply, err = ss.s.cfg.Files.doFileOp(op)
		return err
	})
	if err != nil {
		return ss.reply(errResponse(fileCode(err), fmt.Errorf("%s %s: %w", op.Kind, op.Path, err)))
	}
	return ss.reply(proto.Response{Files: &reply})
}

// fileCode maps an error to a protocol code, telling a permission
// failure apart from a refused path.
func fileCode(err error) string {
	switch {
	case errors.Is(err, fs.ErrPermission):
		return proto.CodeForbidden
	case errors.Is(err, errExists):
		return proto.CodeExists
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTEMPTY),
		errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EXDEV),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG):
		return proto.CodeBadPath // what the caller asked cannot be done to that path
	}
	return codeFor(err)
}

// checked resolves p's symlinks (all of them, or all but the last
// element's when keepLast) and refuses paths that are or lead into the
// denied trees.
func (p FilePolicy) checked(name string, keepLast bool) (string, error) {
	if err := proto.CheckPath(name); err != nil {
		return "", fmt.Errorf("%w: %v", errBadPath, err)
	}
	if p.denied(name) {
		return "", fmt.Errorf("%w: %s is not a regular file system path", errBadPath, name)
	}
	var real string
	var err error
	if keepLast {
		var dir string
		dir, err = filepath.EvalSymlinks(path.Dir(name))
		real = path.Join(dir, path.Base(name))
	} else {
		real, err = filepath.EvalSymlinks(name)
	}
	if err != nil {
		return "", err
	}
	if p.denied(real) {
		return "", fmt.Errorf("%w: %s leads to %s", errBadPath, name, real)
	}
	return real, nil
}

func (p FilePolicy) doFileOp(op *proto.FileOp) (proto.FileReply, error) {
	names := &idNames{}
	switch op.Kind {
	case proto.FileStat:
		real, err := p.checked(op.Path, true)
		if err != nil {
			return proto.FileReply{}, err
		}
		e, err := entryOf(real, op.Path, names)
		return proto.FileReply{Entry: &e}, err
	case proto.FileList:
		real, err := p.checked(op.Path, false)
		if err != nil {
			return proto.FileReply{}, err
		}
		depth := max(op.Depth, 1)
		var out []proto.FileEntry
		if err := listInto(&out, real, op.Path, depth, names); err != nil {
			return proto.FileReply{}, err
		}
		if out == nil {
			out = []proto.FileEntry{}
		}
		return proto.FileReply{Entries: out}, nil
	case proto.FileMkdir:
		real, err := p.resolveMissing(op.Path)
		if err != nil {
			return proto.FileReply{}, err
		}
		created := false
		if fi, err := os.Stat(real); err == nil {
			if !fi.IsDir() {
				return proto.FileReply{}, fmt.Errorf("%s %w", op.Path, errExists)
			}
		} else if errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(real, 0o755); err != nil {
				return proto.FileReply{}, err
			}
			created = true
			if _, err := p.checked(op.Path, false); err != nil {
				return proto.FileReply{}, err
			}
		} else {
			return proto.FileReply{}, err
		}
		return proto.FileReply{Created: &created}, nil
	case proto.FileMove:
		from, err := p.checked(op.Path, true)
		if err != nil {
			return proto.FileReply{}, err
		}
		to, err := p.checked(op.To, true)
		if err != nil {
			return proto.FileReply{}, err
		}
		if err := p.writable(path.Dir(to)); err != nil {
			return proto.FileReply{}, err
		}
		if err := os.Rename(from, to); err != nil {
			return proto.FileReply{}, err
		}
		e, err := entryOf(to, op.To, names)
		return proto.FileReply{Entry: &e}, err
	case proto.FileRemove:
		real, err := p.checked(op.Path, true)
		if err != nil {
			return proto.FileReply{}, err
		}
		if _, err := os.Lstat(real); err != nil {
			return proto.FileReply{}, err
		}
		if err := p.writable(path.Dir(real)); err != nil {
			return proto.FileReply{}, err
		}
		return proto.FileReply{}, os.RemoveAll(real)
	}
	return proto.FileReply{}, fmt.Errorf("%w: file op %s", errBadPath, op.Kind)
}

// resolveMissing resolves the symlinks of name's deepest existing
// ancestor, checks the result against the denied trees and the file
// systems files may be written to, and returns it joined with the
// missing rest: what mkdir then makes.
func (p FilePolicy) resolveMissing(name string) (string, error) {
	if err := proto.CheckPath(name); err != nil {
		return "", fmt.Errorf("%w: %v", errBadPath, err)
	}
	if p.denied(name) {
		return "", fmt.Errorf("%w: %s is not a regular file system path", errBadPath, name)
	}
	cur, rest := name, ""
	for {
		real, err := filepath.EvalSymlinks(cur)
		if err == nil {
			full := path.Join(real, rest)
			if p.denied(real) || p.denied(full) {
				return "", fmt.Errorf("%w: %s leads to %s", errBadPath, name, full)
			}
			if rest != "" {
				if err := p.writable(real); err != nil {
					return "", err
				}
			}
			return full, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || cur == "/" {
			return "", err
		}
		rest = path.Join(path.Base(cur), rest)
		cur = path.Dir(cur)
	}
}

// writable checks that dir is on a file system files may be written to.
func (p FilePolicy) writable(dir string) error {
	if p.AllowedFS == nil {
		return nil
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	return p.checkFS(fd, dir)
}

var errTooMany = fmt.Errorf("%w: more than %d entries", proto.ErrMessageTooLarge, proto.MaxListEntries)

// listInto appends dir's entries, and theirs depth-1 levels further
// down, named under shown (the caller's path, not the resolved one).
// Symlinked directories are listed, not followed.
func listInto(out *[]proto.FileEntry, dir, shown string, depth int, names *idNames) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range ents {
		if len(*out) >= proto.MaxListEntries {
			return errTooMany
		}
		e, err := entryOf(path.Join(dir, de.Name()), path.Join(shown, de.Name()), names)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed while listed
		}
		if err != nil {
			return err
		}
		*out = append(*out, e)
		if depth > 1 && e.Type == "dir" {
			err := listInto(out, path.Join(dir, de.Name()), e.Path, depth-1, names)
			if errors.Is(err, fs.ErrPermission) {
				continue // listed, but not its contents: as ls -R
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// entryOf describes real (not following a last symlink), named shown.
func entryOf(real, shown string, names *idNames) (proto.FileEntry, error) {
	fi, err := os.Lstat(real)
	if err != nil {
		return proto.FileEntry{}, err
	}
	e := proto.FileEntry{
		Name:      path.Base(shown),
		Path:      shown,
		Size:      fi.Size(),
		Mode:      uint32(fi.Mode().Perm()),
		ModTimeNS: fi.ModTime().UnixNano(),
	}
	if e.ModTimeNS < 0 {
		e.ModTimeNS = 0
	}
	m := fi.Mode()
	e.Mode |= unixModeBits(m)
	switch {
	case m.IsRegular():
		e.Type = "file"
	case m.IsDir():
		e.Type = "dir"
	case m&fs.ModeSymlink != 0:
		e.Type = "symlink"
		if t, err := os.Readlink(real); err == nil && len(t) <= proto.MaxPathBytes {
			e.SymlinkTarget = t
		}
	default:
		e.Type = "other"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner, e.Group = names.user(st.Uid), names.group(st.Gid)
	}
	if len(e.Name) > 255 {
		e.Name = e.Name[:255]
	}
	return e, nil
}

func unixModeBits(m fs.FileMode) uint32 {
	var b uint32
	if m&fs.ModeSetuid != 0 {
		b |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		b |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		b |= unix.S_ISVTX
	}
	return b
}

// idNames caches user and group names for one request.
type idNames struct{ users, groups map[uint32]string }

func (n *idNames) user(id uint32) string {
	if n.users == nil {
		n.users = map[uint32]string{}
	}
	if s, ok := n.users[id]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(id), 10)
	if u, err := user.LookupId(s); err == nil && len(u.Username) <= 255 {
		s = u.Username
	}
	n.users[id] = s
	return s
}

func (n *idNames) group(id uint32) string {
	if n.groups == nil {
		n.groups = map[uint32]string{}
	}
	if s, ok := n.groups[id]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(id), 10)
	if g, err := user.LookupGroupId(s); err == nil && len(g.Name) <= 255 {
		s = g.Name
	}
	n.groups[id] = s
	return s
}
