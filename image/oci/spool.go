package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// An import's archive is read once, front to back, into a spool: every
// regular file lands in the spool directory under a number (never under
// its name in the archive, so no archive path can point anywhere on the
// host), with its size and sha256 noted as it is written. Links in the
// archive become aliases in the spool's index and are never made on
// disk. The archive's formats are then read from the spool.

// Bounds of an archive.
const (
	maxArchiveEntries = 1 << 16
	// metadataSlack is room over MaxImageBytes for an archive's configs,
	// manifests and other small files.
	metadataSlack = 64 << 20
	maxLinkDepth  = 8
)

type spoolFile struct {
	file   string // path in the spool directory
	size   int64
	digest string // sha256:<hex>
}

type spool struct {
	dir   string
	files map[string]*spoolFile
	links map[string]string // archive path -> target archive path
}

// readArchive spools the tar archive r (optionally gzip-compressed) into
// a new directory under o.TempDir. On error it leaves nothing.
func readArchive(ctx context.Context, r io.Reader, o Options) (_ *spool, err error) {
	dir, err := os.MkdirTemp(o.TempDir, "cellvm-import-")
	if err != nil {
		return nil, fmt.Errorf("import: a temporary directory: %w", err)
	}
	s := &spool{dir: dir, files: map[string]*spoolFile{}, links: map[string]string{}}
	defer func() {
		if err != nil {
			removeAll(dir)
		}
	}()

	prog := newProgress(o.Progress, sandbox.ImageStepRead, 0)
	br := bufio.NewReaderSize(&countingReader{ctx: ctx, r: r, prog: prog}, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: import: the archive's gzip stream: %v", sandbox.ErrInvalid, err)
		}
		zr.Multistream(false)
		in = zr
	}
	maxFile := o.maxLayer()
	if maxFile < MaxMetadataBytes {
		maxFile = MaxMetadataBytes
	}
	maxTotal := o.maxImage() + metadataSlack
	// The tar stream itself (headers, padding, entries not spooled) is
	// bounded too: a gzip bomb or an entry of no interest cannot make the
	// read endless.
	tr := tar.NewReader(&cappedReader{r: in, left: maxTotal + metadataSlack, capErr: fmt.Errorf("%w: import: the archive is over %s, over the cap of %s an image", sandbox.ErrTooLarge, mib(maxTotal+metadataSlack), mib(o.maxImage()))})
	var total int64
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			if n == 0 {
				return nil, fmt.Errorf("%w: import: the archive is empty: not a docker save tarball or an OCI layout", sandbox.ErrInvalid)
			}
			break
		}
		if err != nil {
			return nil, archiveErr(ctx, n, err)
		}
		if n >= maxArchiveEntries {
			return nil, fmt.Errorf("%w: import: the archive has over %d entries", sandbox.ErrInvalid, maxArchiveEntries)
		}
		p, ok := cleanArchivePath(hdr.Name)
		if !ok {
			continue // outside the archive's root: nothing can name it
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
		case tar.TypeSymlink, tar.TypeLink:
			t := hdr.Linkname
			if hdr.Typeflag == tar.TypeSymlink && !strings.HasPrefix(t, "/") {
				t = path.Join(path.Dir(p), t)
			}
			if t, ok := cleanArchivePath(t); ok && len(s.links) < maxArchiveEntries {
				if err := s.taken(p); err != nil {
					return nil, err
				}
				s.links[p] = t
			}
			continue
		default:
			continue // directories and the rest: no image format needs them
		}
		if err := s.taken(p); err != nil {
			return nil, err
		}
		if hdr.Size > maxFile {
			return nil, fmt.Errorf("%w: import: the archive's %q is %s, over the cap of %s a layer", sandbox.ErrTooLarge, clip(p, 96), mib(hdr.Size), mib(o.maxLayer()))
		}
		if total += hdr.Size; total > maxTotal {
			return nil, fmt.Errorf("%w: import: the archive holds over %s of files, over the cap of %s an image", sandbox.ErrTooLarge, mib(maxTotal), mib(o.maxImage()))
		}
		f, err := s.write(len(s.files), tr, hdr.Size)
		if err != nil {
			return nil, archiveErr(ctx, n, err)
		}
		s.files[p] = f
	}
	return s, nil
}

func (s *spool) taken(p string) error {
	if _, dup := s.files[p]; dup {
		return fmt.Errorf("%w: import: the archive holds %q twice", sandbox.ErrInvalid, clip(p, 96))
	}
	if _, dup := s.links[p]; dup {
		return fmt.Errorf("%w: import: the archive holds %q twice", sandbox.ErrInvalid, clip(p, 96))
	}
	return nil
}

func (s *spool) write(i int, r io.Reader, size int64) (*spoolFile, error) {
	name := filepath.Join(s.dir, strconv.Itoa(i))
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	return &spoolFile{file: name, size: size, digest: "sha256:" + hex.EncodeToString(h.Sum(nil))}, nil
}

// lookup finds the archive's file p, following the archive's own links.
func (s *spool) lookup(p string) (*spoolFile, bool) {
	p, ok := cleanArchivePath(p)
	if !ok {
		return nil, false
	}
	for i := 0; i <= maxLinkDepth; i++ {
		if f, ok := s.files[p]; ok {
			return f, true
		}
		t, ok := s.links[p]
		if !ok {
			return nil, false
		}
		p = t
	}
	return nil, false
}

// readSmall reads a spooled metadata file whole.
func (s *spool) readSmall(what string, f *spoolFile) ([]byte, error) {
	if f.size > MaxMetadataBytes {
		return nil, fmt.Errorf("%w: import: %s is %d bytes, at most %d", sandbox.ErrInvalid, what, f.size, MaxMetadataBytes)
	}
	b, err := os.ReadFile(f.file)
	if err != nil {
		return nil, fmt.Errorf("import: reading %s back from the spool: %w", what, err)
	}
	if int64(len(b)) != f.size {
		return nil, fmt.Errorf("import: %s changed in the spool", what)
	}
	return b, nil
}

// keepOnly removes the spooled files not in keep.
func (s *spool) keepOnly(keep map[string]bool) {
	for _, f := range s.files {
		if !keep[f.file] {
			os.Remove(f.file)
		}
	}
}

// cleanArchivePath is p as a clean relative path inside the archive, or
// false when it leaves the archive's root.
func cleanArchivePath(p string) (string, bool) {
	if p == "" || strings.IndexByte(p, 0) >= 0 || len(p) > 4096 {
		return "", false
	}
	p = path.Clean("/" + p)[1:]
	if p == "" {
		return "", false
	}
	return p, true
}

func archiveErr(ctx context.Context, n int, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("import: reading the archive: %w", ctxErr)
	}
	if errors.Is(err, sandbox.ErrTooLarge) {
		return err
	}
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: import: the archive is truncated", sandbox.ErrInvalid)
	case errors.Is(err, tar.ErrHeader) && n == 0:
		return fmt.Errorf("%w: import: not a tar archive: not a docker save tarball or an OCI layout", sandbox.ErrInvalid)
	case errors.Is(err, tar.ErrHeader), errors.Is(err, gzip.ErrChecksum), errors.Is(err, gzip.ErrHeader):
		return fmt.Errorf("%w: import: the archive is corrupt: %v", sandbox.ErrInvalid, err)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("import: spooling the archive: %w", err)
	}
	return fmt.Errorf("%w: import: reading the archive: %v", sandbox.ErrInvalid, err)
}

// countingReader reports the archive's bytes read and stops on the
// context's end.
type countingReader struct {
	ctx  context.Context
	r    io.Reader
	prog *progress
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	c.prog.add(n)
	return n, err
}

// cappedReader fails with capErr past left bytes.
type cappedReader struct {
	r      io.Reader
	left   int64
	capErr error
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, c.capErr
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
