package vmm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// The memory file is guest RAM, region after region (snapshot.MemoryLayout).
// Pages that are all zero are left as holes, so a guest that touched little
// of its memory makes a small file; they read back as zeros. The writer
// sums the file as it goes (snapshot.MemoryHash: the bytes it writes, and
// each hole at the cost of its length), in file order, so the state file
// can carry the memory file's digest without a second read.

const pageSize = 4096

// writeRun is how much guest memory writeMemory looks at per write.
const writeRun = 2 << 20

// writeMemory writes guest memory to f as the memory file: f is emptied,
// sized, and every page that is not all zero written at its place. With
// pagemap (the process's page map, or nil), pages the guest never touched
// are not read but taken from src (untouched.go). The stats carry the
// file's CRC-32C. progress, when not nil, is called every progressEvery
// with the bytes of guest memory done so far: a save of a large guest
// under load takes minutes, and its log says how far it got.
func writeMemory(f *os.File, mem *guestmem.Regions, layout []snapshot.MemoryRegion, pagemap *os.File, src *memSource, progress func(done int64, stats memWriteStats)) (memWriteStats, error) {
	var pm io.ReaderAt
	if pagemap != nil {
		pm = pagemap
	}
	var w regionWriter
	err := w.write(f, mem, layout, pm, src, progress)
	w.stats.Sum = w.sum.Sum32()
	return w.stats, err
}

// memWriteStats says where a memory file's pages came from, in bytes, and
// what the file sums to (snapshot.MemoryHash).
type memWriteStats struct {
	FromMemory, FromSource, Holes int64
	UsedPagemap                   bool
	Sum                           uint32
}

func (w *regionWriter) write(f *os.File, mem *guestmem.Regions, layout []snapshot.MemoryRegion, pagemap io.ReaderAt, src *memSource, progress func(int64, memWriteStats)) error {
	regs := mem.List()
	if len(regs) != len(layout) {
		return fmt.Errorf("memory file: %d regions, the layout has %d", len(regs), len(layout))
	}
	if src != nil && src.file != nil && len(src.fileOffsets) != len(regs) {
		return fmt.Errorf("memory file: %d regions, the source file has %d", len(regs), len(src.fileOffsets))
	}
	if src != nil && pagemap != nil {
		// Untouched pages come from the source: where it has holes.
		if err := src.baseExtents(); err != nil {
			return err
		}
	}
	var total uint64
	for _, l := range layout {
		total += l.Size
	}
	// A file the daemon handed over already allocated at the memory's
	// size (a tmpfs's, whose pages it pays for: sandbox/engine's
	// memcharge.go) is written in place, and every run of zero pages is
	// punched out, so that every byte of it is written or a hole, as in
	// a file emptied first. Any other file is emptied and sized.
	prealloc := false
	if fi, err := f.Stat(); err == nil && fi.Size() == int64(total) && total > 0 {
		prealloc = true
	} else {
		if err := f.Truncate(0); err != nil {
			return fmt.Errorf("memory file: %w", err)
		}
		if err := f.Truncate(int64(total)); err != nil {
			return fmt.Errorf("memory file: size it to %d MiB: %w", total>>20, err)
		}
	}
	*w = regionWriter{f: f, pagemap: pagemap, src: src, zero: make([]byte, pageSize), buf: make([]byte, writeRun),
		flags: make([]uint64, writeRun/pageSize), punch: prealloc, progress: progress, lastProgress: time.Now()}
	w.stats.UsedPagemap = pagemap != nil
	var next uint64
	for i, r := range regs {
		l := layout[i]
		if r.GuestAddr != l.GuestAddr || uint64(len(r.Data)) != l.Size {
			return fmt.Errorf("memory file: region %d is %#x+%#x, the layout says %#x+%#x", i, r.GuestAddr, len(r.Data), l.GuestAddr, l.Size)
		}
		// The sum is of the file in order: the regions must follow
		// each other with no gap (snapshot.MemoryLayout's do).
		if l.FileOffset != next || len(r.Data)%pageSize != 0 {
			return fmt.Errorf("memory file: region %d at file offset %#x (+%#x), want %#x and whole pages", i, l.FileOffset, l.Size, next)
		}
		next += l.Size
		if err := w.region(i, r.Data, int64(l.FileOffset)); err != nil {
			return fmt.Errorf("memory file: region at %#x: %w", r.GuestAddr, err)
		}
	}
	return nil
}

// regionWriter writes regions of guest memory into the memory file.
type regionWriter struct {
	f       *os.File
	pagemap io.ReaderAt // nil: read every page
	src     *memSource  // what untouched pages hold; nil: anonymous
	zero    []byte
	buf     []byte
	flags   []uint64
	stats   memWriteStats
	sum     snapshot.MemoryHash // of what was written so far, holes as zeros
	// punch: the file came allocated, and its holes must be punched.
	punch bool
	// progress is told of the bytes done every progressEvery (nil: not).
	progress     func(int64, memWriteStats)
	lastProgress time.Time
	done         int64
}

// progressEvery is how often a save in progress says how far it got.
const progressEvery = 10 * time.Second

// Where a page's bytes come from.
const (
	fromNone = iota // zero: left a hole
	fromMem         // the guest's memory
	fromSrc         // the source memory file (an untouched page)
)

// region writes data, region i of guest memory, at off in the file, one
// chunk of at most writeRun bytes at a time; within a chunk, each run of
// pages from the same place is one write (or one copy, from one source
// file at consecutive offsets).
func (w *regionWriter) region(i int, data []byte, off int64) error {
	for chunk := 0; chunk < len(data); chunk += writeRun {
		end := min(chunk+writeRun, len(data))
		n := (end - chunk) / pageSize
		havePM := w.pagemap != nil
		if havePM {
			if err := pageFlags(w.pagemap, uintptrOf(data[chunk:]), n, w.flags); err != nil {
				return err
			}
		}
		runKind, runStart := fromNone, chunk
		var runFile *os.File // fromSrc: the file, and where the run starts in it
		var runFrom int64
		flush := func(at int) error {
			switch runKind {
			case fromNone:
				w.stats.Holes += int64(at - runStart)
				w.sum.Zeros(int64(at - runStart))
				if w.punch && at > runStart {
					if err := unix.Fallocate(int(w.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off+int64(runStart), int64(at-runStart)); err != nil {
						return fmt.Errorf("punch a hole in the memory file: %w", err)
					}
				}
			case fromMem:
				w.stats.FromMemory += int64(at - runStart)
				if _, err := w.f.WriteAt(data[runStart:at], off+int64(runStart)); err != nil {
					return fmt.Errorf("write guest memory: %w", err)
				}
				w.sum.Write(data[runStart:at])
			case fromSrc:
				w.stats.FromSource += int64(at - runStart)
				if err := copyFileRange(w.f, off+int64(runStart), runFile, runFrom, int64(at-runStart), w.buf, &w.sum); err != nil {
					return err
				}
			}
			return nil
		}
		for p := 0; p < n; p++ {
			at := chunk + p*pageSize
			kind := fromMem
			var file *os.File
			var from int64
			switch {
			case havePM && untouched(w.flags[p]):
				kind = fromNone
				if w.src != nil && w.src.file != nil {
					var data bool
					if file, from, data = w.src.locate(w.src.fileOffsets[i] + int64(at)); data {
						kind = fromSrc
					}
				}
			case bytes.Equal(data[at:at+pageSize], w.zero):
				kind = fromNone
			}
			if kind != runKind || (kind == fromSrc && (file != runFile || from != runFrom+int64(at-runStart))) {
				if err := flush(at); err != nil {
					return err
				}
				runKind, runStart, runFile, runFrom = kind, at, file, from
			}
		}
		if err := flush(end); err != nil {
			return err
		}
		w.done += int64(end - chunk)
		if w.progress != nil && time.Since(w.lastProgress) >= progressEvery {
			w.lastProgress = time.Now()
			w.progress(w.done, w.stats)
		}
	}
	return nil
}

// mapMemoryFile maps the memory file's regions private and copy-on-write:
// pages are read from the file when the guest first touches them, a write
// gives the guest a copy of its own, and every VM restored from the same
// file shares the pages none of them wrote (in the host's page cache). The
// file must not change while a VM runs from it.
func mapMemoryFile(f *os.File, layout []snapshot.MemoryRegion) (*guestmem.Regions, func(), error) {
	var total uint64
	for _, l := range layout {
		total += l.Size
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("memory file: %w", err)
	}
	if uint64(fi.Size()) != total {
		return nil, nil, fmt.Errorf("memory file %s holds %d bytes, the snapshot's memory is %d: it is not this snapshot's memory file", f.Name(), fi.Size(), total)
	}
	if host, err := hostMemTotal(); err == nil && total > host {
		return nil, nil, fmt.Errorf("guest memory of %d MiB is more than this host has (%d MiB)", total>>20, host>>20)
	}
	var regs []guestmem.Region
	unmap := func() {
		for _, r := range regs {
			unix.Munmap(r.Data)
		}
	}
	for i, l := range layout {
		if l.Size == 0 || l.Size%pageSize != 0 || l.FileOffset%pageSize != 0 {
			unmap()
			return nil, nil, fmt.Errorf("memory region %d (%#x bytes at file offset %#x) is not whole pages", i, l.Size, l.FileOffset)
		}
		data, err := unix.Mmap(int(f.Fd()), int64(l.FileOffset), int(l.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
		if err != nil {
			unmap()
			return nil, nil, fmt.Errorf("map %d MiB of the memory file: %w", l.Size>>20, err)
		}
		regs = append(regs, guestmem.Region{GuestAddr: l.GuestAddr, Data: data})
	}
	mem, err := guestmem.FromRegions(regs...)
	if err != nil {
		unmap()
		return nil, nil, err
	}
	return mem, unmap, nil
}
