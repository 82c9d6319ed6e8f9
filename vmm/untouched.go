package vmm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Writing the memory file reads guest memory page by page, and a page the
// guest never touched still costs a fault when it is read: a zero page for
// anonymous memory, and for a machine restored from a memory file a read
// of that file, whose pages the save then writes again. On a large guest
// that touched little (the common case) those faults are most of a save;
// under nested emulation the second pause of a once-restored sandbox took
// 24 s against the first one's 3 s.
//
// The process's page map (/proc/self/pagemap, one 64-bit entry a page)
// says which pages of a mapping are present or swapped out. A page that is
// neither was never touched, or was dropped clean: its content is what the
// mapping gives an untouched page. That is zero for anonymous memory, and
// for a private mapping of a memory file it is the file's page: zero where
// the file has a hole (its extents, from lseek SEEK_DATA/SEEK_HOLE), the
// file's bytes elsewhere, which are copied file to file. A page the guest
// wrote is a private copy, present or swapped, and is read as before.
//
// A jailed VMM has no /proc, so the page map is opened before the jail is
// entered (Config.Pagemap). Without one the save reads every page.

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
const (
	pagemapPresent = 1 << 63
	pagemapSwapped = 1 << 62
	// pagemapFile: the present page is a file's (or shared anonymous),
	// not a private copy. For a private mapping of a memory file that
	// means the guest did not write it: it reads the file's page.
	pagemapFile = 1 << 61
)

// memSource is what a machine's memory is mapped from: nothing (anonymous)
// or a memory file whose regions lie at layout's offsets, with the layers
// of a chain over it (layers.go).
type memSource struct {
	file *os.File // the base; nil: anonymous memory
	// fileOffsets[i] is where region i starts in the image.
	fileOffsets []int64
	// extents are file's data extents, sorted; read once, by the first
	// save that needs them (baseExtents), not at restore: a restore that
	// is never saved again (most forks) would walk the file for nothing,
	// and the walk of a large image's thousands of extents costs tens of
	// milliseconds.
	extents     []extent
	extentsRead bool
	// layers are the chain's files over the base, bottom to top.
	layers []srcLayer
	// chain is what a save that writes a layer over this memory names as
	// the files under it (snapshot.Machine.Layers); nil when no layer may
	// be written over it (the memory file has no sum to name it by).
	chain []snapshot.Layer
}

type extent struct{ start, end int64 }

// extentWalks counts fileExtents' walks, for the test that a restore
// walks none.
var extentWalks atomic.Int64

// newMemSource describes memory mapped from f at layout's offsets. It keeps
// a descriptor of its own (the caller may close f). f's extents are read
// later, by the first save that needs them (baseExtents): a memory file
// does not change while a machine runs from it.
func newMemSource(f *os.File, layout []snapshot.MemoryRegion) (*memSource, error) {
	file, err := dupFile(f)
	if err != nil {
		return nil, err
	}
	src := &memSource{file: file}
	for _, l := range layout {
		src.fileOffsets = append(src.fileOffsets, int64(l.FileOffset))
	}
	return src, nil
}

// dupFile is a descriptor of f's own, under f's name.
func dupFile(f *os.File) (*os.File, error) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("memory file %s: %w", f.Name(), err)
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// close closes the source's files.
func (s *memSource) close() error {
	var errs []error
	if s.file != nil {
		errs = append(errs, s.file.Close())
	}
	for _, l := range s.layers {
		errs = append(errs, l.file.Close())
	}
	return errors.Join(errs...)
}

// baseExtents reads the base file's extents, once.
func (s *memSource) baseExtents() error {
	if s.extentsRead || s.file == nil {
		return nil
	}
	ext, err := fileExtents(s.file)
	if err != nil {
		return fmt.Errorf("memory file %s: %w", s.file.Name(), err)
	}
	s.extents, s.extentsRead = ext, true
	return nil
}

// fileExtents lists f's data extents with SEEK_DATA and SEEK_HOLE.
func fileExtents(f *os.File) ([]extent, error) {
	extentWalks.Add(1)
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	var out []extent
	for off := int64(0); off < size; {
		start, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole after off
		}
		if err != nil {
			return nil, fmt.Errorf("SEEK_DATA: %w", err)
		}
		end, err := unix.Seek(int(f.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return nil, fmt.Errorf("SEEK_HOLE: %w", err)
		}
		out = append(out, extent{start, end})
		off = end
	}
	return out, nil
}

// hasData reports whether [off, off+n) of the base file holds any data
// (baseExtents must have run).
func (s *memSource) hasData(off, n int64) bool {
	i := sort.Search(len(s.extents), func(i int) bool { return s.extents[i].end > off })
	return i < len(s.extents) && s.extents[i].start < off+n
}

// locate says where the page at off in the image comes from when the
// guest never wrote it: the top layer that holds it, or else the
// base. data is false for a hole of the base (zeros).
func (s *memSource) locate(off int64) (f *os.File, at int64, data bool) {
	for i := len(s.layers) - 1; i >= 0; i-- {
		if at, ok := s.layers[i].find(off); ok {
			return s.layers[i].file, at, true
		}
	}
	return s.file, off, s.hasData(off, pageSize)
}

// pageFlags reads the page map entries of the n pages from addr into
// flags (len >= n). A short read is an error: the entries it did not fill
// would read as untouched, and every guest write in them would be a hole
// in the saved image.
func pageFlags(pagemap io.ReaderAt, addr uintptr, n int, flags []uint64) error {
	buf := make([]byte, 8*n)
	k, err := pagemap.ReadAt(buf, int64(addr/pageSize)*8)
	if k < len(buf) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("read the page map at %#x: %d of %d entries: %w", addr, k/8, n, err)
	}
	for i := 0; i < n; i++ {
		flags[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return nil
}

// untouched reports whether a page map entry says the page was never
// touched (or dropped clean): neither present nor swapped.
func untouched(flags uint64) bool { return flags&(pagemapPresent|pagemapSwapped) == 0 }

// copyFileRange copies n bytes at src's offset from to dst's offset to,
// through a buffer (pread and pwrite only, which the jail allows), and
// adds them to sum.
func copyFileRange(dst *os.File, to int64, src *os.File, from, n int64, buf []byte, sum *snapshot.MemoryHash) error {
	for n > 0 {
		chunk := buf
		if int64(len(chunk)) > n {
			chunk = chunk[:n]
		}
		k, err := src.ReadAt(chunk, from)
		if k < len(chunk) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read the source memory file at %#x: %w", from, err)
		}
		if _, err := dst.WriteAt(chunk, to); err != nil {
			return err
		}
		sum.Write(chunk)
		from, to, n = from+int64(k), to+int64(k), n-int64(k)
	}
	return nil
}
