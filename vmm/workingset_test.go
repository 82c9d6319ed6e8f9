package vmm

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// wholeImage writes a whole memory image of chainLayout's 64 pages, each
// page filled with its index, and returns its state and file.
func wholeImage(t *testing.T) (*snapshot.State, *os.File) {
	t.Helper()
	var img []byte
	for p := range 64 {
		img = append(img, page(byte(p+1))...)
	}
	path := filepath.Join(t.TempDir(), "mem")
	if err := os.WriteFile(path, img, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout}}, f
}

// pagesOf is the set of image pages the extents cover.
func pagesOf(ext []snapshot.Extent) map[int]bool {
	out := map[int]bool{}
	for _, e := range ext {
		for off := e.Off; off < e.Off+e.Len; off += pageSize {
			out[int(off/pageSize)] = true
		}
	}
	return out
}

// The working set of a machine restored from a memory file holds the
// pages its guest read and wrote since the restore, and none far from
// them: the kernel maps a read page's neighbours in the page cache with
// it (fault-around, 16 pages), a written page alone. The fault-around
// window is aligned in the mapping's virtual addresses, not in the
// file, so for the read of page 3 it covers 16 pages somewhere in 0..18
// (a clean-clone CI run saw pages 2..17).
func TestWorkingSetRecordsTouchedPages(t *testing.T) {
	st, mem := wholeImage(t)
	regs, _ := restored(t, st, mem)
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no page map: %v", err)
	}
	defer pm.Close()
	r := regs.List()
	// The page read, and how far fault-around reaches from it.
	const read, aroundMax = 3, 15
	if r[0].Data[read*pageSize] != read+1 { // read image page 3
		t.Fatal("image page 3 does not read the file's")
	}
	r[0].Data[20*pageSize] = 9 // write image page 20
	r[1].Data[8*pageSize] = 9  // write image page 40 (region 1's page 8)
	ext, err := workingSet(regs, chainLayout, pm)
	if err != nil {
		t.Fatal(err)
	}
	if err := snapshot.ValidateExtents(ext, 64*pageSize); err != nil {
		t.Fatal(err)
	}
	got := pagesOf(ext)
	for _, p := range []int{3, 20, 40} {
		if !got[p] {
			t.Errorf("image page %d was touched but is not in the working set %+v", p, ext)
		}
	}
	for p := range got {
		if p > read+aroundMax && p != 20 && p != 40 {
			t.Errorf("image page %d was not touched but is in the working set %+v", p, ext)
		}
	}
}

// A prefetch issues MADV_WILLNEED, then MADV_POPULATE_READ, over each
// recorded extent, clipped to the regions (an extent across the regions'
// boundary is two calls, one outside them none); the populated pages are
// then present without the guest touching them. A failing call stops its
// pass and nothing else.
func TestPrefetchAdvisesTheRecordedRanges(t *testing.T) {
	st, mem := wholeImage(t)
	regs, _ := restored(t, st, mem)
	ext := []snapshot.Extent{
		{Off: 2 * pageSize, Len: 2 * pageSize},   // region 0
		{Off: 30 * pageSize, Len: 4 * pageSize},  // 30, 31 | 32, 33
		{Off: 48 * pageSize, Len: 3 * pageSize},  // region 1
		{Off: 100 * pageSize, Len: 1 * pageSize}, // outside the image
	}
	type call struct {
		addr   uintptr
		n      int
		advice int
	}
	var calls []call
	real := madvise
	defer func() { madvise = real }()
	madvise = func(b []byte, advice int) error {
		calls = append(calls, call{uintptrOf(b), len(b), advice})
		return real(b, advice)
	}
	prefetch(regs.List(), chainLayout, ext, slog.New(slog.DiscardHandler))
	r := regs.List()
	want := []call{
		{uintptrOf(r[0].Data[2*pageSize:]), 2 * pageSize, 0},
		{uintptrOf(r[0].Data[30*pageSize:]), 2 * pageSize, 0},
		{uintptrOf(r[1].Data[0:]), 2 * pageSize, 0},
		{uintptrOf(r[1].Data[16*pageSize:]), 3 * pageSize, 0},
	}
	if len(calls) != 2*len(want) {
		t.Fatalf("%d madvise calls, want %d: %+v", len(calls), 2*len(want), calls)
	}
	for i, c := range calls {
		w := want[i%len(want)]
		w.advice = unix.MADV_WILLNEED
		if i >= len(want) {
			w.advice = unix.MADV_POPULATE_READ
		}
		if c != w {
			t.Errorf("call %d: %+v, want %+v", i, c, w)
		}
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no page map: %v", err)
	}
	defer pm.Close()
	flags := make([]uint64, 3)
	if err := pageFlags(pm, uintptrOf(r[1].Data[16*pageSize:]), 3, flags); err != nil {
		t.Fatal(err)
	}
	for i, f := range flags {
		if untouched(f) {
			t.Errorf("image page %d is not present after its prefetch (flags %#x)", 48+i, f)
		}
	}
	if !bytes.Equal(r[1].Data[16*pageSize:17*pageSize], page(49)) {
		t.Error("a prefetched page does not read the file's")
	}

	calls = nil
	madvise = func(b []byte, advice int) error {
		calls = append(calls, call{uintptrOf(b), len(b), advice})
		return errors.New("no")
	}
	prefetch(regs.List(), chainLayout, ext, slog.New(slog.DiscardHandler))
	if len(calls) != 2 {
		t.Fatalf("with madvise failing, %d calls, want one a pass", len(calls))
	}
}
