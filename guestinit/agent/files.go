package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// DefaultMaxUpload bounds one upload unless the policy says otherwise.
const DefaultMaxUpload = 4 << 30

// DeniedPrefixes are the trees no upload or download may touch: kernel
// interfaces, not files.
var DeniedPrefixes = []string{"/proc", "/sys", "/dev"}

// FilePolicy says which paths uploads may write and downloads may read.
type FilePolicy struct {
	// Deny lists path prefixes refused before and after symlinks are
	// resolved. Nil: DeniedPrefixes.
	Deny []string
	// AllowedFS lists the file system magics (statfs f_type) a written
	// file may live on, e.g. overlayfs and tmpfs in the guest. Nil: any
	// (tests on a host).
	AllowedFS []int64
	// MaxUpload bounds one upload in bytes. Default DefaultMaxUpload.
	MaxUpload int64
	// Owner, when set, is whose permissions every upload and download is
	// done with (the cells' user in the guest). Nil: the agent's.
	Owner *Owner
}

// GuestFilePolicy is the policy of the guest: the overlay root and tmpfs
// mounts (/tmp, /run) only.
func GuestFilePolicy() FilePolicy {
	return FilePolicy{AllowedFS: []int64{unix.OVERLAYFS_SUPER_MAGIC, unix.TMPFS_MAGIC}}
}

func (p FilePolicy) maxUpload() int64 {
	if p.MaxUpload <= 0 {
		return DefaultMaxUpload
	}
	return p.MaxUpload
}

var errBadPath = errors.New("path refused")

// denied reports whether clean absolute path p is in a denied tree.
func (p FilePolicy) denied(name string) bool {
	deny := p.Deny
	if deny == nil {
		deny = DeniedPrefixes
	}
	for _, d := range deny {
		if name == d || strings.HasPrefix(name, d+"/") {
			return true
		}
	}
	return name == "/"
}

// resolveDir checks name lexically, resolves the symlinks of its parent
// directory (creating it if create is set) and checks the result again.
// It returns the resolved parent and the base name.
func (p FilePolicy) resolveDir(name string, create bool) (dir, base string, err error) {
	if err := proto.CheckPath(name); err != nil {
		return "", "", fmt.Errorf("%w: %v", errBadPath, err)
	}
	if p.denied(name) {
		return "", "", fmt.Errorf("%w: %s is not a regular file system path", errBadPath, name)
	}
	dir, base = path.Dir(name), path.Base(name)
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", "", fmt.Errorf("create %s: %w", dir, err)
		}
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", "", fmt.Errorf("resolve %s: %w", dir, err)
	}
	if p.denied(path.Join(real, base)) {
		return "", "", fmt.Errorf("%w: %s leads to %s", errBadPath, name, path.Join(real, base))
	}
	return real, base, nil
}

func (p FilePolicy) checkFS(fd int, name string) error {
	if p.AllowedFS == nil {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", name, err)
	}
	for _, m := range p.AllowedFS {
		if int64(st.Type) == m {
			return nil
		}
	}
	return fmt.Errorf("%w: %s is on a file system (0x%x) files may not be written to", errBadPath, name, st.Type)
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// codeFor maps an error to a protocol error code.
func codeFor(err error) string {
	switch {
	case errors.Is(err, errBadPath):
		return proto.CodeBadPath
	case errors.Is(err, fs.ErrNotExist):
		return proto.CodeNotFound
	case errors.Is(err, fs.ErrPermission):
		return proto.CodeBadPath // the cells' user may not touch it
	case errors.Is(err, proto.ErrMessageTooLarge):
		return proto.CodeTooLarge
	}
	return proto.CodeIO
}

// upload receives a data stream into req.Path: written to a temporary
// file beside it and renamed over it when complete, so a failed upload
// leaves the old file (or none). The stream is read to its end even when
// the path is refused, so the connection stays in step; a stream past the
// size limit closes the connection.
func (ss *session) upload(req *proto.Request) bool {
	pol := ss.s.cfg.Files
	data := ss.c.DataReader(pol.maxUpload())
	var n int64
	err := pol.Owner.asOwner(func() (err error) {
		n, err = ss.receive(req, data)
		return err
	})
	if err != nil {
		if !data.Done() {
			if derr := data.Drain(); derr != nil && !isDataEnd(derr) {
				ss.reply(errResponse(codeFor(derr), derr))
				return false
			}
		}
		var pe *proto.Error
		if errors.As(err, &pe) {
			// The host ended its own stream with an error: nothing written.
			return ss.reply(proto.Response{Error: pe})
		}
		ok := ss.reply(errResponse(codeFor(err), fmt.Errorf("upload %s: %w", req.Path, err)))
		return ok && !errors.Is(err, proto.ErrMessageTooLarge) && !errors.Is(err, proto.ErrBadFrame)
	}
	return ss.reply(proto.Response{Written: &n})
}

func isDataEnd(err error) bool {
	var pe *proto.Error
	return errors.As(err, &pe)
}

func (ss *session) receive(req *proto.Request, data *proto.DataReader) (int64, error) {
	pol := ss.s.cfg.Files
	dir, base, err := pol.resolveDir(req.Path, true)
	if err != nil {
		return 0, err
	}
	dfd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	if err := pol.checkFS(dfd, dir); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, fmt.Errorf("%w: %s exists and is not a regular file", errBadPath, req.Path)
	}
	mode := req.Mode
	if mode == 0 {
		mode = 0o644
	}
	var tmpName string
	var fd int
	for i := 0; ; i++ {
		tmpName = fmt.Sprintf(".%s.cellvm-upload-%d", base, i)
		if len(tmpName) > 255 {
			tmpName = fmt.Sprintf(".cellvm-upload-%d", i)
		}
		fd, err = unix.Openat(dfd, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) || i >= 100 {
			return 0, fmt.Errorf("create temporary file in %s: %w", dir, err)
		}
	}
	f := os.NewFile(uintptr(fd), path.Join(dir, tmpName))
	committed := false
	defer func() {
		f.Close()
		if !committed {
			unix.Unlinkat(dfd, tmpName, 0)
		}
	}()
	buf := make([]byte, 256<<10)
	n, err := io.CopyBuffer(f, data, buf)
	if err != nil {
		return n, err
	}
	if err := f.Chmod(fs.FileMode(mode).Perm() | modeBits(mode)); err != nil {
		return n, fmt.Errorf("chmod: %w", err)
	}
	if err := f.Close(); err != nil {
		return n, fmt.Errorf("close: %w", err)
	}
	if err := unix.Renameat(dfd, tmpName, dfd, base); err != nil {
		return n, fmt.Errorf("rename into place: %w", err)
	}
	committed = true
	return n, nil
}

// modeBits converts setuid/setgid/sticky permission bits to fs.FileMode.
func modeBits(m uint32) fs.FileMode {
	var fm fs.FileMode
	if m&unix.S_ISUID != 0 {
		fm |= fs.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= fs.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= fs.ModeSticky
	}
	return fm
}

// download sends req.Path: a Response with its size, then its bytes as a
// data stream ended by DataEnd (with an error if reading failed midway).
func (ss *session) download(req *proto.Request) bool {
	var f *os.File
	var size int64
	var mode uint32
	err := ss.s.cfg.Files.Owner.asOwner(func() (err error) {
		f, size, mode, err = ss.openForDownload(req.Path)
		return err
	})
	if err != nil {
		return ss.reply(errResponse(codeFor(err), fmt.Errorf("download %s: %w", req.Path, err)))
	}
	defer f.Close()
	if !ss.reply(proto.Response{File: &proto.FileInfo{Size: size, Mode: mode}}) {
		return false
	}
	// Never more than announced: the host treats more as a protocol
	// violation (a file growing while it is read stops at its old size).
	r := io.LimitReader(f, size)
	buf := make([]byte, proto.MaxFramePayload)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			ss.nc.SetWriteDeadline(timeNowPlus(ss.s.cfg.WriteTimeout))
			if err := ss.c.WriteData(buf[:n]); err != nil {
				ss.s.log.Warn("agent: download write", "err", err)
				return false
			}
		}
		if rerr == io.EOF {
			return ss.c.WriteDataEnd(nil) == nil
		}
		if rerr != nil {
			return ss.c.WriteDataEnd(&proto.Error{Code: proto.CodeIO, Message: rerr.Error()}) == nil
		}
	}
}

func (ss *session) openForDownload(name string) (*os.File, int64, uint32, error) {
	dir, base, err := ss.s.cfg.Files.resolveDir(name, false)
	if err != nil {
		return nil, 0, 0, err
	}
	real, err := filepath.EvalSymlinks(path.Join(dir, base))
	if err != nil {
		return nil, 0, 0, err
	}
	if ss.s.cfg.Files.denied(real) {
		return nil, 0, 0, fmt.Errorf("%w: %s leads to %s", errBadPath, name, real)
	}
	// O_NONBLOCK: opening a FIFO must not hang the connection.
	f, err := os.OpenFile(real, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, 0, fmt.Errorf("%w: %s is not a regular file", errBadPath, name)
	}
	return f, fi.Size(), uint32(fi.Mode().Perm()), nil
}
