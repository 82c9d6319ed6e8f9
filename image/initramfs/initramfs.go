// Package initramfs writes the newc cpio archives cellvm boots guests
// with, using u-root's cpio package: a list of files, directories and
// symlinks, each from bytes or from a host file, written reproducibly
// (fixed owners and times) so the archive's hash is a cache key.
package initramfs

import (
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/u-root/u-root/pkg/cpio"
)

// Entry is one file in the archive.
type Entry struct {
	Path     string // inside the archive, without a leading slash
	Mode     uint64 // permission bits
	Data     []byte // contents, or
	HostPath string // a host file to copy
	Symlink  string // when set, Path is a symlink to this target
	Dir      bool
	// CharDev, when set, makes Path a character device with this
	// major/minor (the kernel opens /dev/console before init runs, so an
	// initramfs needs that node).
	CharDev *[2]uint64
}

// Write writes entries (and the directories above them) as a newc archive.
func Write(w io.Writer, entries []Entry) error {
	dirs := map[string]bool{}
	var recs []cpio.Record
	addDirs := func(p string) {
		for d := path.Dir(p); d != "." && d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
			recs = append(recs, cpio.Directory(d, 0o755))
		}
	}
	for _, e := range entries {
		p := strings.TrimPrefix(path.Clean("/"+e.Path), "/")
		if p == "" {
			return fmt.Errorf("initramfs entry with an empty path")
		}
		addDirs(p)
		switch {
		case e.Dir:
			if !dirs[p] {
				dirs[p] = true
				mode := e.Mode
				if mode == 0 {
					mode = 0o755
				}
				recs = append(recs, cpio.Directory(p, mode))
			}
		case e.CharDev != nil:
			mode := e.Mode
			if mode == 0 {
				mode = 0o600
			}
			recs = append(recs, cpio.CharDev(p, mode, e.CharDev[0], e.CharDev[1]))
		case e.Symlink != "":
			recs = append(recs, cpio.Symlink(p, e.Symlink))
		default:
			data := e.Data
			if e.HostPath != "" {
				b, err := os.ReadFile(e.HostPath)
				if err != nil {
					return fmt.Errorf("initramfs: %w", err)
				}
				data = b
			}
			mode := e.Mode
			if mode == 0 {
				mode = 0o644
			}
			recs = append(recs, cpio.StaticRecord(data, cpio.Info{Name: p, Mode: cpio.S_IFREG | mode}))
		}
	}
	// Directories first (sorted), so the kernel creates parents before children.
	sort.SliceStable(recs, func(i, j int) bool {
		di, dj := recs[i].Info.Mode&cpio.S_IFMT == cpio.S_IFDIR, recs[j].Info.Mode&cpio.S_IFMT == cpio.S_IFDIR
		if di != dj {
			return di
		}
		if di {
			return recs[i].Info.Name < recs[j].Info.Name
		}
		return false
	})
	cpio.MakeAllReproducible(recs)
	rw := cpio.Newc.Writer(w)
	if err := cpio.WriteRecords(rw, recs); err != nil {
		return fmt.Errorf("write initramfs: %w", err)
	}
	return cpio.WriteTrailer(rw)
}

// WriteFile writes entries as a newc archive at path.
func WriteFile(path string, entries []Entry) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Write(f, entries); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}
