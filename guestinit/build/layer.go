package build

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// The layer applier: an OCI layer's tar stream applied to a Root, as
// `docker load` would lay it on the layers below, with nothing written
// outside the root whatever the archive holds. Each entry's directory is
// resolved in the root (Root.openDir: links followed inside it, missing
// directories made), and the entry itself is made with the *at calls on
// its last component, never following it: an existing entry is removed
// first (a link is removed, not followed), unless both are directories.
// A hard link's target is resolved in the root the same way.
//
// OCI whiteouts: ".wh.NAME" removes NAME (from the layers below);
// ".wh..wh..opq" empties its directory of what the layers below put
// there, sparing what this layer has already put there.

// Limits of a layer (the out disk bounds the bytes as well).
const (
	DefaultMaxEntries = 1 << 19 // entries of one layer
	maxXattrs         = 128     // per entry
	maxXattrValue     = 64 << 10
	whiteoutPrefix    = ".wh."
	opaqueWhiteout    = ".wh..wh..opq"
)

// Applier applies tar entries to a root.
type Applier struct {
	Root *Root
	// MaxEntries bounds the entries of one Apply (DefaultMaxEntries when 0).
	MaxEntries int
	// MaxBytes bounds the file bytes written over the Applier's life (no
	// bound when 0).
	MaxBytes int64
	// Inputs: the tree is a build's own inputs, not an image: owners are
	// root's, xattrs are dropped, devices and pipes refused, and ".wh."
	// names are plain names.
	Inputs bool
	// Warn reports what is skipped (an xattr the file system refuses).
	Warn func(string)

	written int64
	warned  int
	buf     []byte
}

// layer is one Apply's state.
type layer struct {
	entries int
	// made are the names this layer has put in place (and their
	// directories), spared by its opaque whiteouts.
	made map[string]struct{}
	dirs []dirTimes
}

type dirTimes struct {
	name         string
	atime, mtime time.Time
}

// Written is the file bytes written so far.
func (a *Applier) Written() int64 { return a.written }

// Apply applies the uncompressed tar stream r.
func (a *Applier) Apply(r io.Reader) error {
	tr := tar.NewReader(r)
	l := a.newLayer()
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the layer's tar: %w", err)
		}
		if err := a.entry(l, hdr, tr); err != nil {
			return err
		}
	}
	return a.finish(l)
}

func (a *Applier) newLayer() *layer { return &layer{made: map[string]struct{}{}} }

// finish sets the directories' times, which their entries changed.
func (a *Applier) finish(l *layer) error {
	for i := len(l.dirs) - 1; i >= 0; i-- {
		d := l.dirs[i]
		ts := []unix.Timespec{unix.NsecToTimespec(d.atime.UnixNano()), unix.NsecToTimespec(d.mtime.UnixNano())}
		if d.name == "." {
			unix.UtimesNanoAt(a.Root.fd, ".", ts, 0)
			continue
		}
		pfd, base, err := a.Root.parent(d.name, false)
		if err != nil {
			continue // removed by a later entry
		}
		unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(pfd)
	}
	return nil
}

func (a *Applier) warn(msg string) {
	if a.Warn == nil {
		return
	}
	if a.warned++; a.warned <= 20 {
		a.Warn(msg)
	} else if a.warned == 21 {
		a.Warn("more warnings left out")
	}
}

// entry applies one tar entry; its errors name it.
func (a *Applier) entry(l *layer, hdr *tar.Header, r io.Reader) error {
	max := a.MaxEntries
	if max <= 0 {
		max = DefaultMaxEntries
	}
	if l.entries++; l.entries > max {
		return fmt.Errorf("the layer has more than %d entries", max)
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := cleanName(hdr.Name)
	if err == nil {
		err = a.apply(l, name, hdr, r)
	}
	if err != nil {
		return fmt.Errorf("entry %q: %w", clip(hdr.Name), err)
	}
	return nil
}

func (a *Applier) apply(l *layer, name string, hdr *tar.Header, r io.Reader) error {
	if name == "." {
		// The root itself: its owner, mode and times.
		if hdr.Typeflag != tar.TypeDir {
			return errors.New("the root can only be a directory")
		}
		if err := a.meta(a.Root.fd, ".", hdr, a.Root.fd); err != nil {
			return err
		}
		l.dirs = append(l.dirs, dirTimes{".", atime(hdr), hdr.ModTime})
		return nil
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if !a.Inputs && strings.HasPrefix(base, whiteoutPrefix) {
		return a.whiteout(l, dir, base)
	}
	if base == ".." {
		return errors.New("bad name")
	}
	pfd, err := a.Root.openDir(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = a.mkdir(pfd, base, hdr)
		if err == nil {
			l.dirs = append(l.dirs, dirTimes{name, atime(hdr), hdr.ModTime})
		}
	case tar.TypeReg, tar.TypeGNUSparse, '\x00':
		err = a.file(pfd, base, hdr, r)
	case tar.TypeSymlink:
		err = a.symlink(pfd, base, hdr)
	case tar.TypeLink:
		err = a.hardlink(pfd, base, name, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		if a.Inputs {
			return errors.New("a device or pipe among a build's files: only files, directories and links are taken")
		}
		err = a.node(pfd, base, hdr)
	default:
		return fmt.Errorf("entry type %q is not taken (files, directories, links, devices and pipes are)", hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	l.mark(name)
	return nil
}

// mark records name and its directories as this layer's.
func (l *layer) mark(name string) {
	for name != "." && name != "" {
		if _, ok := l.made[name]; ok {
			return
		}
		l.made[name] = struct{}{}
		name = path.Dir(name)
	}
}

func atime(hdr *tar.Header) time.Time {
	if hdr.AccessTime.IsZero() {
		return hdr.ModTime
	}
	return hdr.AccessTime
}

func (a *Applier) whiteout(l *layer, dir, base string) error {
	if base == opaqueWhiteout {
		fd, err := a.Root.openDir(dir, true)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		err = emptyDir(fd, 0, func(n string) bool {
			_, ok := l.made[joinRel(dir, n)]
			return ok
		})
		if err != nil {
			return fmt.Errorf("opaque whiteout of %s: %w", dir, err)
		}
		l.mark(dir)
		return nil
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if target == "" || target == "." || target == ".." {
		return fmt.Errorf("whiteout %q names nothing", base)
	}
	fd, err := a.Root.openDir(dir, false)
	if err != nil {
		return nil // nothing below to hide
	}
	defer unix.Close(fd)
	return removeAllAt(fd, target)
}

// replace clears the way for a new entry base in pfd: what is there is
// removed, unless keepDir and it is a directory. It reports whether a
// directory was kept.
func replace(pfd int, base string, keepDir bool) (bool, error) {
	st, ok, err := lstatAt(pfd, base)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, nil
	}
	if keepDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true, nil
	}
	return false, removeAllAt(pfd, base)
}

func (a *Applier) mkdir(pfd int, base string, hdr *tar.Header) error {
	kept, err := replace(pfd, base, true)
	if err != nil {
		return err
	}
	if !kept {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return err
		}
	}
	fd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return a.meta(pfd, base, hdr, fd)
}

func (a *Applier) file(pfd int, base string, hdr *tar.Header, r io.Reader) error {
	if hdr.Size < 0 {
		return errors.New("negative size")
	}
	if a.MaxBytes > 0 && a.written+hdr.Size > a.MaxBytes {
		return fmt.Errorf("%d bytes more would exceed the bound of %d MiB", hdr.Size, a.MaxBytes>>20)
	}
	if _, err := replace(pfd, base, false); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if a.buf == nil {
		a.buf = make([]byte, 1<<20)
	}
	var n int64
	for n < hdr.Size {
		want := int64(len(a.buf))
		if hdr.Size-n < want {
			want = hdr.Size - n
		}
		m, rerr := io.ReadFull(r, a.buf[:want])
		if m > 0 {
			if err := writeAll(fd, a.buf[:m]); err != nil {
				return err
			}
			n += int64(m)
			a.written += int64(m)
		}
		if rerr != nil {
			return fmt.Errorf("reading its data: %w", rerr)
		}
	}
	return a.meta(pfd, base, hdr, fd)
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			if err == unix.ENOSPC {
				return errors.New("no space left on the image's disk: the image is bigger than its disk")
			}
			return err
		}
		b = b[n:]
	}
	return nil
}

func (a *Applier) symlink(pfd int, base string, hdr *tar.Header) error {
	if hdr.Linkname == "" || len(hdr.Linkname) > maxPathLen || strings.IndexByte(hdr.Linkname, 0) >= 0 {
		return fmt.Errorf("bad link target of %d bytes", len(hdr.Linkname))
	}
	if _, err := replace(pfd, base, false); err != nil {
		return err
	}
	// The target is only text: it is resolved, later, in the image.
	if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
		return err
	}
	return a.meta(pfd, base, hdr, -1)
}

func (a *Applier) hardlink(pfd int, base, name string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target: %w", err)
	}
	if target == "." || target == name {
		return fmt.Errorf("hard link to %q", clip(hdr.Linkname))
	}
	tfd, tbase, err := a.Root.parent(target, false)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", clip(hdr.Linkname), err)
	}
	defer unix.Close(tfd)
	st, ok, err := lstatAt(tfd, tbase)
	if err != nil || !ok {
		return fmt.Errorf("hard link target %q is not in the image (so far)", clip(hdr.Linkname))
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("hard link to the directory %q", clip(hdr.Linkname))
	}
	if dst, ok, _ := lstatAt(pfd, base); ok && dst.Ino == st.Ino && dst.Dev == st.Dev {
		return nil // already that file
	}
	if _, err := replace(pfd, base, false); err != nil {
		return err
	}
	// Flags 0: a link to a symbolic link links the link itself.
	return unix.Linkat(tfd, tbase, pfd, base, 0)
}

func (a *Applier) node(pfd int, base string, hdr *tar.Header) error {
	var kind uint32
	switch hdr.Typeflag {
	case tar.TypeChar:
		kind = unix.S_IFCHR
	case tar.TypeBlock:
		kind = unix.S_IFBLK
	default:
		kind = unix.S_IFIFO
	}
	if hdr.Devmajor < 0 || hdr.Devminor < 0 || hdr.Devmajor > 0xfff || hdr.Devminor > 0xfffff {
		return fmt.Errorf("device %d:%d out of range", hdr.Devmajor, hdr.Devminor)
	}
	if _, err := replace(pfd, base, false); err != nil {
		return err
	}
	dev := unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor))
	if err := unix.Mknodat(pfd, base, kind|0o600, int(dev)); err != nil {
		return err
	}
	return a.meta(pfd, base, hdr, -1)
}

// meta sets base's owner, mode, xattrs and times (directories' times
// again at the layer's end). fd is base opened, or -1.
func (a *Applier) meta(pfd int, base string, hdr *tar.Header, fd int) error {
	uid, gid := hdr.Uid, hdr.Gid
	if a.Inputs {
		uid, gid = 0, 0
	}
	if uid < 0 || gid < 0 || uid > 0x7ffffffe || gid > 0x7ffffffe {
		return fmt.Errorf("owner %d:%d out of range", uid, gid)
	}
	isLink := hdr.Typeflag == tar.TypeSymlink
	// The owner first: a change of owner clears setuid bits and file
	// capabilities, which the mode and xattrs then set.
	if fd >= 0 {
		if err := unix.Fchown(fd, uid, gid); err != nil {
			return fmt.Errorf("owner: %w", err)
		}
	} else if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("owner: %w", err)
	}
	if !isLink {
		mode := uint32(hdr.Mode) & 0o7777
		if fd >= 0 {
			if err := unix.Fchmod(fd, mode); err != nil {
				return fmt.Errorf("mode: %w", err)
			}
		} else if err := chmodNoFollow(pfd, base, mode); err != nil {
			return fmt.Errorf("mode: %w", err)
		}
	}
	if !a.Inputs {
		if err := a.xattrs(pfd, base, hdr, fd, isLink); err != nil {
			return err
		}
	}
	if base == "." {
		return nil
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime(hdr).UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("times: %w", err)
	}
	return nil
}

// chmodNoFollow changes the mode of base in pfd, which is no link: it is
// opened O_PATH|O_NOFOLLOW and changed through its /proc descriptor, so
// a link put there meanwhile is never followed.
func chmodNoFollow(pfd int, base string, mode uint32) error {
	fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return errors.New("is a symbolic link")
	}
	return unix.Fchmodat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), mode, 0)
}

func (a *Applier) xattrs(pfd int, base string, hdr *tar.Header, fd int, isLink bool) error {
	var keys []string
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if len(keys) > maxXattrs {
		return fmt.Errorf("%d xattrs, at most %d", len(keys), maxXattrs)
	}
	sort.Strings(keys)
	for _, k := range keys {
		attr := strings.TrimPrefix(k, "SCHILY.xattr.")
		val := []byte(hdr.PAXRecords[k])
		if attr == "" || len(attr) > 255 || len(val) > maxXattrValue {
			return fmt.Errorf("xattr %q of %d bytes", clip(attr), len(val))
		}
		var err error
		switch {
		case fd >= 0:
			err = unix.Fsetxattr(fd, attr, val, 0)
		case isLink && strings.HasPrefix(attr, "user."):
			continue // the kernel takes no user.* xattrs on links
		default:
			err = unix.Lsetxattr(procPath(pfd, base), attr, val, 0)
		}
		if err == unix.ENOSPC || err == unix.EDQUOT {
			return fmt.Errorf("xattr %s: %w", attr, err)
		}
		if err != nil {
			a.warn(fmt.Sprintf("xattr %s of %s left out: %v", clip(attr), clip(hdr.Name), err))
		}
	}
	return nil
}

// Compression magics.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// zstd's window bound: the VM has about 1 GiB.
const maxZstdWindow = 128 << 20

// Decompress opens a layer blob by its media type (…tar, …tar+gzip,
// docker's ….tar.gzip, …tar+zstd), checked against its first bytes. The
// returned closer ends the decompressor.
func Decompress(r io.Reader, mediaType string) (io.Reader, func(), error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(4)
	mt := strings.ToLower(mediaType)
	wantGzip := strings.HasSuffix(mt, "gzip")
	wantZstd := strings.HasSuffix(mt, "zstd")
	isGzip, isZstd := bytes.HasPrefix(head, gzipMagic), bytes.HasPrefix(head, zstdMagic)
	switch {
	case wantGzip && !isGzip, wantZstd && !isZstd:
		return nil, nil, fmt.Errorf("the layer's media type %q does not match its first bytes %x", clip(mediaType), head)
	case isGzip:
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("the layer's gzip header: %w", err)
		}
		return gz, func() { gz.Close() }, nil
	case isZstd:
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, nil, fmt.Errorf("the layer's zstd stream: %w", err)
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}
