package recipe

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// MaxArchiveEntries bounds the files, directories and links an archive
// holds.
const MaxArchiveEntries = 1 << 20

// ErrBadInput is a local file a recipe cannot take: missing, outside its
// context, a device, too large. The CLI reads it as a usage error.
var ErrBadInput = errors.New("bad recipe input")

// Scan walks the files as WriteArchive would and returns the bytes of
// file content they hold; it refuses what WriteArchive would, before
// anything is sent.
func Scan(files []ArchiveFile, root string, limit int64) (int64, error) {
	var total int64
	entries := 0
	err := walk(files, root, func(_ string, p string, info fs.FileInfo) error {
		entries++
		if entries > MaxArchiveEntries {
			return fmt.Errorf("%w: more than %d files", ErrBadInput, MaxArchiveEntries)
		}
		if info.Mode().IsRegular() {
			total += info.Size()
			if total > limit {
				return fmt.Errorf("%w: the recipe's files are more than %d MiB (at %s)", ErrBadInput, limit>>20, p)
			}
		}
		return nil
	})
	return total, err
}

// WriteArchive writes the files as a tar to w: each ArchiveFile's Src at
// its Dst, directories walked (links inside are kept as links, never
// followed), modes kept, owners root. With root set, every Src must be
// inside root once links are resolved (a Dockerfile's context). Regular
// files' content past limit bytes in all is an error.
func WriteArchive(w io.Writer, files []ArchiveFile, root string, limit int64) error {
	tw := tar.NewWriter(w)
	var total int64
	err := walk(files, root, func(name, p string, info fs.FileInfo) error {
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrBadInput, p, err)
		}
		hdr.Name, hdr.Format = name, tar.FormatPAX
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "root", "root"
		hdr.AccessTime, hdr.ChangeTime = hdr.ModTime, hdr.ModTime
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		total += info.Size()
		if total > limit {
			return fmt.Errorf("%w: the recipe's files are more than %d MiB (at %s)", ErrBadInput, limit>>20, p)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, info.Size()); err != nil {
			return fmt.Errorf("%s changed while it was read: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// walk calls f for every entry of files in order, with its archive
// name, its path here and its Lstat.
func walk(files []ArchiveFile, root string, f func(name, p string, info fs.FileInfo) error) error {
	realRoot := ""
	if root != "" {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			return fmt.Errorf("%w: the build context %s: %v", ErrBadInput, root, err)
		}
		realRoot = r
	}
	seen := map[string]bool{}
	for _, af := range files {
		dst := path.Clean(af.Dst)
		if dst == "." || strings.HasPrefix(dst, "/") || strings.HasPrefix(dst, "../") || dst == ".." || seen[dst] {
			return fmt.Errorf("%w: archive path %q", ErrBadInput, af.Dst)
		}
		seen[dst] = true
		if realRoot != "" {
			if err := inside(realRoot, af.Src); err != nil {
				return err
			}
		}
		top, err := os.Lstat(af.Src)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		if !top.IsDir() {
			if err := check(af.Src, top); err != nil {
				return err
			}
			if err := f(dst, af.Src, top); err != nil {
				return err
			}
			continue
		}
		err = filepath.WalkDir(af.Src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("%w: %v", ErrBadInput, err)
			}
			info, err := d.Info()
			if err != nil {
				return fmt.Errorf("%w: %v", ErrBadInput, err)
			}
			if err := check(p, info); err != nil {
				return err
			}
			rel, err := filepath.Rel(af.Src, p)
			if err != nil {
				return err
			}
			return f(path.Join(dst, filepath.ToSlash(rel)), p, info)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// check refuses what an image's files cannot be.
func check(p string, info fs.FileInfo) error {
	m := info.Mode()
	switch {
	case m.IsRegular(), m.IsDir(), m&fs.ModeSymlink != 0:
		return nil
	case m&fs.ModeDevice != 0, m&fs.ModeCharDevice != 0:
		return fmt.Errorf("%w: %s is a device; an image's files are regular files, directories and links", ErrBadInput, p)
	}
	return fmt.Errorf("%w: %s is a %s; an image's files are regular files, directories and links", ErrBadInput, p, m.Type())
}

// inside refuses a source whose directory resolves outside root (a link
// on the way out of the context); the source itself, a link, is kept
// as a link.
func inside(realRoot, src string) error {
	dir, err := filepath.EvalSymlinks(filepath.Dir(src))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadInput, err)
	}
	p := filepath.Join(dir, filepath.Base(src))
	if rel, err := filepath.Rel(realRoot, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%w: %s is outside the build context %s", ErrBadInput, src, realRoot)
	}
	return nil
}
