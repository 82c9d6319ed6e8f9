package engine

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// A recipe's archive is the caller's tar of inputs (wheels, requirements,
// trees to copy). The host reads it once, bounded (entries, bytes, names,
// link targets), keeps only files, directories and symbolic links with
// their modes (owners, times, xattrs and devices never reach the image),
// re-emits them under buildplan.InputsDir into a spool the inputs disk is
// made from, and hashes what it kept for the build's key. It never
// unpacks anything onto the host's file system.

const (
	maxArchiveEntries = 200_000
	maxArchivePath    = 1024
)

// recipeInputs is what the host kept of a recipe's archive.
type recipeInputs struct {
	// digest hashes the entries (type, mode, path, link target, content).
	digest []byte
	// kinds are the paths there are, explicit or implied parents: 'd'
	// directory, 'f' file, 'l' link.
	kinds map[string]byte
	bytes int64
}

// readRecipeArchive reads r (nil: an empty archive) into spool, a tar of
// the kept entries under buildplan.InputsDir, bounded by maxBytes of
// content.
func readRecipeArchive(r io.Reader, spool io.Writer, maxBytes int64) (*recipeInputs, error) {
	in := &recipeInputs{kinds: map[string]byte{".": 'd'}}
	h := sha256.New()
	tw := tar.NewWriter(spool)
	if r != nil {
		if err := in.read(tar.NewReader(r), tw, h, maxBytes); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("spool the recipe's inputs: %w", err)
	}
	in.digest = h.Sum(nil)
	return in, nil
}

func archiveErr(format string, args ...any) error {
	return fmt.Errorf("%w: the recipe's archive: "+format, append([]any{sandbox.ErrInvalid}, args...)...)
}

func (in *recipeInputs) read(tr *tar.Reader, tw *tar.Writer, h hash.Hash, maxBytes int64) error {
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return archiveErr("not a tar archive, or a damaged one (entry %d: %v)", n+1, err)
		}
		if n >= maxArchiveEntries {
			return archiveErr("more than %d entries", maxArchiveEntries)
		}
		name, err := cleanArchivePath(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue // the archive's root
		}
		if _, dup := in.kinds[name]; dup && !(hdr.Typeflag == tar.TypeDir && in.kinds[name] == 'd') {
			return archiveErr("%q appears twice, or under a file", clip(name, 128))
		}
		if err := in.addParents(name); err != nil {
			return err
		}
		mode := hdr.FileInfo().Mode()
		perm := int64(mode.Perm())
		if mode&fs.ModeSetuid != 0 {
			perm |= 0o4000
		}
		if mode&fs.ModeSetgid != 0 {
			perm |= 0o2000
		}
		if mode&fs.ModeSticky != 0 {
			perm |= 0o1000
		}
		out := &tar.Header{Name: buildplan.InputsDir + "/" + name, Mode: perm, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		switch hdr.Typeflag {
		case tar.TypeDir:
			out.Typeflag, out.Name = tar.TypeDir, out.Name+"/"
			in.kinds[name] = 'd'
			fmt.Fprintf(h, "d %o %q\n", perm, name)
			if err := tw.WriteHeader(out); err != nil {
				return fmt.Errorf("spool the recipe's inputs: %w", err)
			}
		case tar.TypeSymlink:
			if len(hdr.Linkname) == 0 || len(hdr.Linkname) > maxArchivePath || strings.IndexByte(hdr.Linkname, 0) >= 0 {
				return archiveErr("link %q has no target or one of more than %d bytes", clip(name, 128), maxArchivePath)
			}
			out.Typeflag, out.Linkname, out.Mode = tar.TypeSymlink, hdr.Linkname, 0o777
			in.kinds[name] = 'l'
			fmt.Fprintf(h, "l %q %q\n", name, hdr.Linkname)
			if err := tw.WriteHeader(out); err != nil {
				return fmt.Errorf("spool the recipe's inputs: %w", err)
			}
		case tar.TypeReg, tar.TypeGNUSparse:
			if hdr.Size < 0 || hdr.Size > maxBytes-in.bytes {
				return fmt.Errorf("%w: the recipe's archive holds more than %d MiB", sandbox.ErrTooLarge, maxBytes>>20)
			}
			in.bytes += hdr.Size
			out.Typeflag, out.Size = tar.TypeReg, hdr.Size
			in.kinds[name] = 'f'
			if err := tw.WriteHeader(out); err != nil {
				return fmt.Errorf("spool the recipe's inputs: %w", err)
			}
			fh := sha256.New()
			if k, err := io.Copy(io.MultiWriter(tw, fh), io.LimitReader(tr, hdr.Size)); err != nil || k != hdr.Size {
				return archiveErr("reading %q: %d of %d bytes (%v)", clip(name, 128), k, hdr.Size, err)
			}
			fmt.Fprintf(h, "f %o %q %x\n", perm, name, fh.Sum(nil))
		default:
			return archiveErr("%q is a %s: only files, directories and symbolic links go into an image", clip(name, 128), typeName(hdr.Typeflag))
		}
	}
}

// addParents records name's parents as directories.
func (in *recipeInputs) addParents(name string) error {
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		switch in.kinds[d] {
		case 'd':
			return nil
		case 0:
			in.kinds[d] = 'd'
		default:
			return archiveErr("%q lies under %q, which is not a directory", clip(name, 128), clip(d, 128))
		}
	}
	return nil
}

// cleanArchivePath is an entry's path, relative and clean, or an error.
func cleanArchivePath(p string) (string, error) {
	if len(p) > maxArchivePath || strings.IndexByte(p, 0) >= 0 {
		return "", archiveErr("an entry's name is longer than %d bytes or holds a NUL", maxArchivePath)
	}
	if strings.HasPrefix(p, "/") {
		return "", archiveErr("%q is an absolute path", clip(p, 128))
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return "", archiveErr("%q contains \"..\"", clip(p, 128))
		}
	}
	return path.Clean(p), nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "named pipe"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}

// checkSteps checks that every archive path a step names is there, and
// of the kind the step needs.
func (in *recipeInputs) checkSteps(steps []sandbox.RecipeStep) error {
	need := func(i int, what, p string, kinds string) error {
		if p == "" {
			return nil
		}
		clean := path.Clean(p)
		k, ok := in.kinds[clean]
		if !ok {
			return fmt.Errorf("%w: step %d: %s %q is not in the recipe's archive (it holds %s)", sandbox.ErrInvalid, i+1, what, clip(p, 128), in.sample())
		}
		if !strings.ContainsRune(kinds, rune(k)) {
			return fmt.Errorf("%w: step %d: %s %q is not a %s in the recipe's archive", sandbox.ErrInvalid, i+1, what, clip(p, 128), map[string]string{"d": "directory", "f": "file", "fdl": "file or directory"}[kinds])
		}
		return nil
	}
	for i, s := range steps {
		for _, c := range []struct{ what, p, kinds string }{
			{"pip_wheels", s.PipWheels, "d"}, {"requirements", s.Requirements, "f"}, {"copy_from", s.CopyFrom, "fdl"},
		} {
			if err := need(i, c.what, c.p, c.kinds); err != nil {
				return err
			}
		}
	}
	return nil
}

// sample names a few of the archive's paths, for an error.
func (in *recipeInputs) sample() string {
	var top []string
	for p := range in.kinds {
		if p != "." && !strings.Contains(p, "/") {
			top = append(top, p)
		}
	}
	if len(top) == 0 {
		return "nothing"
	}
	sort.Strings(top)
	if len(top) > 8 {
		top = append(top[:8], "...")
	}
	return strings.Join(top, ", ")
}
