package vmm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A recorded working set (vmm/snapshot's workingset.go): WorkingSet
// records, from the page map, the pages a restored machine's guest
// touched since its restore, read or written; a restore given such a
// record (Config.Prefetch) reads those ranges ahead before its first vCPU
// runs, instead of one fault at a time as the guest reaches them.
//
// The prefetch is two passes of madvise over the guest mapping, which
// follows a chain's layers as the guest would: MADV_WILLNEED on every
// extent first, which queues the reads of all of them at once (the page
// cache's readahead), then MADV_POPULATE_READ, which waits for them and
// maps the pages, so that the guest's first touch of each costs no host
// fault (on a kernel without it, older than 5.14, the first pass stands
// alone). A populated page the guest then writes is copied, as it would
// have been. The prefetch is a hint: a call that fails is logged and the
// restore goes on.

// maxRecordedExtents bounds the extents WorkingSet gathers before it
// coalesces them (4 MiB of them): a guest whose touched pages are more
// scattered than that (a megabyte of pages, each apart) has no record.
const maxRecordedExtents = 1 << 18

// madvise is unix.Madvise; tests count its calls.
var madvise = unix.Madvise

// WorkingSet lists the extents of the memory image whose pages the
// guest of a machine restored from a memory file touched since the
// restore (present or swapped in its mapping), coalesced to at most
// snapshot.MaxWorkingSetExtents. It needs the page map (Config.Pagemap)
// and may run while the guest does: the record is a hint.
func (m *Machine) WorkingSet() ([]snapshot.Extent, error) {
	if m.memSrc == nil {
		return nil, errors.New("working set: the machine was booted, not restored from a memory file")
	}
	if m.cfg.Pagemap == nil {
		return nil, errors.New("working set: no page map")
	}
	return workingSet(m.mem, snapshot.MemoryLayout(m.cfg.MemoryMiB), m.cfg.Pagemap)
}

// workingSet is WorkingSet of mem, laid out in the image as layout says.
func workingSet(mem *guestmem.Regions, layout []snapshot.MemoryRegion, pagemap io.ReaderAt) ([]snapshot.Extent, error) {
	ext, err := pageExtents(mem, layout, pagemap, touched, maxRecordedExtents)
	if err != nil {
		return nil, fmt.Errorf("working set: %w", err)
	}
	return snapshot.CoalesceExtents(ext, snapshot.MaxWorkingSetExtents), nil
}

// touched says whether a page map entry is a page the guest touched: not
// untouched.
func touched(flags uint64) bool { return !untouched(flags) }

// prefetch reads ahead the extents ext of the machine's memory image.
func (m *Machine) prefetch(ext []snapshot.Extent) {
	prefetch(m.mem.List(), snapshot.MemoryLayout(m.cfg.MemoryMiB), ext, m.log)
}

// prefetch reads ahead the extents ext of the image laid out in regs as
// layout says (the two passes above), and logs how many bytes it asked
// for. Extents are clipped to the regions (a coalesced extent may span
// two); an extent outside them is skipped. A pass stops at its first
// failed call, which the log says, and the restore goes on.
func prefetch(regs []guestmem.Region, layout []snapshot.MemoryRegion, ext []snapshot.Extent, log *slog.Logger) {
	if len(ext) == 0 {
		return
	}
	start := time.Now()
	ranges := prefetchRanges(regs, layout, ext)
	var bytes int64
	for _, b := range ranges {
		bytes += int64(len(b))
	}
	var errs []error
	for _, advice := range []int{unix.MADV_WILLNEED, unix.MADV_POPULATE_READ} {
		for _, b := range ranges {
			if err := madvise(b, advice); err != nil {
				errs = append(errs, fmt.Errorf("madvise(%d) of %d bytes: %w", advice, len(b), err))
				break // the pass's first failure says it; EINVAL: no such advice
			}
		}
	}
	log.Info("restore: prefetched the recorded working set", "extents", len(ext), "ranges", len(ranges),
		"bytes", bytes, "took_ms", time.Since(start).Milliseconds(), "error", errors.Join(errs...))
}

// prefetchRanges is the guest memory each extent of the image covers, in
// the regions regs that layout places in the image, clipped to them.
func prefetchRanges(regs []guestmem.Region, layout []snapshot.MemoryRegion, ext []snapshot.Extent) [][]byte {
	var out [][]byte
	for _, e := range ext {
		for i, l := range layout {
			if i >= len(regs) || uint64(len(regs[i].Data)) != l.Size {
				continue
			}
			lo, hi := max(e.Off, l.FileOffset), min(e.Off+e.Len, l.FileOffset+l.Size)
			if e.Off+e.Len < e.Off || lo >= hi {
				continue
			}
			out = append(out, regs[i].Data[lo-l.FileOffset:hi-l.FileOffset])
		}
	}
	return out
}
