package vmm

import (
	"bytes"
	"errors"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

const testPages = 64

func openPagemap(t *testing.T) *os.File {
	t.Helper()
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Skipf("no page map here: %v", err)
	}
	t.Cleanup(func() { pm.Close() })
	return pm
}

// present lists which of the region's pages the page map says are present
// or swapped.
func present(t *testing.T, pm *os.File, data []byte) []bool {
	t.Helper()
	n := len(data) / pageSize
	flags := make([]uint64, n)
	if err := pageFlags(pm, uintptrOf(data), n, flags); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, n)
	for i, f := range flags {
		out[i] = !untouched(f)
	}
	return out
}

func writeAndRead(t *testing.T, mem *guestmem.Regions, layout []snapshot.MemoryRegion, pm *os.File, src *memSource) []byte {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stats, err := writeMemory(f, mem, layout, pm, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The sum taken while writing is the file's.
	if sum, _, err := snapshot.SumFile(f); err != nil || sum != stats.Sum {
		t.Fatalf("the save summed its memory file to %08x, the file sums to %08x (%v)", stats.Sum, sum, err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A booted machine's memory is anonymous: with the page map, a save writes
// what the guest wrote and nothing else, without reading (so without
// faulting in) the pages it never touched; the file is the same as a save
// that reads every page.
func TestSaveSkipsUntouchedAnonymousPages(t *testing.T) {
	pm := openPagemap(t)
	data, err := unix.Mmap(-1, 0, testPages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	unix.Madvise(data, unix.MADV_NOHUGEPAGE)
	mem, err := guestmem.FromRegions(guestmem.Region{GuestAddr: 0, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	layout := []snapshot.MemoryRegion{{GuestAddr: 0, Size: testPages * pageSize, FileOffset: 0}}
	for _, p := range []int{3, 10, 11} {
		copy(data[p*pageSize+17:], "the guest wrote this")
	}
	if data[20*pageSize] != 0 { // read: the zero page, present
		t.Fatal("untouched anonymous memory is not zero")
	}
	got := writeAndRead(t, mem, layout, pm, nil)
	// Before anything else reads the memory: the save faulted in no page.
	for p, in := range present(t, pm, data) {
		want := p == 3 || p == 10 || p == 11 || p == 20
		if in != want {
			t.Errorf("page %d present=%v after the save, want %v (the save faulted in a page the guest never touched)", p, in, want)
		}
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the memory file differs from the guest's memory")
	}
	if full := writeAndRead(t, mem, layout, nil, nil); !bytes.Equal(full, got) {
		t.Error("a save that reads every page wrote another file")
	}
}

// A restored machine's memory is its memory file, mapped private: pages it
// never touched are the file's, which a save copies file to file (data) or
// leaves as holes, without reading them through the mapping; pages it
// wrote are its own copies. The result is what a save that reads every
// page writes.
func TestSaveOfARestoredMachineCopiesUntouchedPages(t *testing.T) {
	pm := openPagemap(t)
	srcPath := filepath.Join(t.TempDir(), "src")
	src, err := os.Create(srcPath)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if err := src.Truncate(testPages * pageSize); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 2, 3, 4} {
		src.WriteAt(bytes.Repeat([]byte{'A'}, pageSize), int64(p*pageSize))
	}
	src.WriteAt(bytes.Repeat([]byte{'B'}, pageSize), 40*pageSize)
	// The file's data is on disk and not in the page cache, as an old
	// snapshot's would be.
	src.Sync()
	unix.Fadvise(int(src.Fd()), 0, 0, unix.FADV_DONTNEED)
	layout := []snapshot.MemoryRegion{{GuestAddr: 0, Size: testPages * pageSize, FileOffset: 0}}
	mem, unmap, err := mapMemoryFile(src, layout)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	data := mem.List()[0].Data
	unix.Madvise(data, unix.MADV_NOHUGEPAGE)
	copy(data[2*pageSize:], "over the file's data")
	copy(data[50*pageSize+9:], "over a hole")
	if data[40*pageSize] != 'B' { // read: the file's page, present
		t.Fatal("the mapping does not show the file")
	}
	ms, err := newMemSource(src, layout)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.file.Close()
	if err := ms.baseExtents(); err != nil {
		t.Fatal(err)
	}
	if len(ms.extents) == 0 {
		t.Skip("this file system reports no extents (SEEK_DATA)")
	}
	// What the guest touched, and the kernel mapped around it (fault-around
	// maps neighbours of a file page read): the save must add nothing.
	before := present(t, pm, data)
	for _, p := range []int{1, 3, 4, 60} {
		if before[p] {
			t.Fatalf("page %d is present before the save: the test cannot tell a save that reads it", p)
		}
	}
	got := writeAndRead(t, mem, layout, pm, ms)
	for p, in := range present(t, pm, data) {
		if in != before[p] {
			t.Errorf("page %d present=%v after the save, %v before: the save faulted it in", p, in, before[p])
		}
	}
	want := make([]byte, testPages*pageSize)
	for _, p := range []int{1, 3, 4} {
		copy(want[p*pageSize:(p+1)*pageSize], bytes.Repeat([]byte{'A'}, pageSize))
	}
	copy(want[2*pageSize:3*pageSize], bytes.Repeat([]byte{'A'}, pageSize))
	copy(want[2*pageSize:], "over the file's data")
	copy(want[40*pageSize:41*pageSize], bytes.Repeat([]byte{'B'}, pageSize))
	copy(want[50*pageSize+9:], "over a hole")
	if !bytes.Equal(got, want) {
		for p := 0; p < testPages; p++ {
			if !bytes.Equal(got[p*pageSize:(p+1)*pageSize], want[p*pageSize:(p+1)*pageSize]) {
				t.Errorf("page %d of the memory file differs: %q...", p, got[p*pageSize:p*pageSize+24])
			}
		}
	}
	if full := writeAndRead(t, mem, layout, nil, nil); !bytes.Equal(full, got) {
		t.Error("a save that reads every page wrote another file")
	}
}

// For random mixes of what a source file holds (data, holes) and what the
// guest did to each page (nothing, read, wrote), runs of pages across
// writeRun's chunks included, a save with the page map writes the same
// file as a save that reads every page.
func TestSaveWithPagemapMatchesAFullSave(t *testing.T) {
	pm := openPagemap(t)
	const pages = 3 * writeRun / pageSize / 2 // one and a half chunks
	for seed := int64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewSource(seed))
		src, err := os.Create(filepath.Join(t.TempDir(), "src"))
		if err != nil {
			t.Fatal(err)
		}
		src.Truncate(pages * pageSize)
		for p := 0; p < pages; p++ {
			if rng.Intn(3) == 0 {
				src.WriteAt(bytes.Repeat([]byte{byte(1 + rng.Intn(250))}, pageSize), int64(p*pageSize))
			}
		}
		src.Sync()
		unix.Fadvise(int(src.Fd()), 0, 0, unix.FADV_DONTNEED)
		layout := []snapshot.MemoryRegion{{GuestAddr: 0, Size: pages * pageSize, FileOffset: 0}}
		mem, unmap, err := mapMemoryFile(src, layout)
		if err != nil {
			t.Fatal(err)
		}
		data := mem.List()[0].Data
		var sum byte
		for p := 0; p < pages; p++ {
			switch rng.Intn(4) {
			case 0:
				data[p*pageSize+rng.Intn(pageSize)] = byte(rng.Intn(256))
			case 1:
				sum += data[p*pageSize]
			}
		}
		ms, err := newMemSource(src, layout)
		if err != nil {
			t.Fatal(err)
		}
		fast := writeAndRead(t, mem, layout, pm, ms)
		full := writeAndRead(t, mem, layout, nil, nil)
		if !bytes.Equal(fast, full) {
			t.Errorf("seed %d: the save with the page map differs from a full save (sum %d)", seed, sum)
		}
		ms.file.Close()
		unmap()
		src.Close()
	}
}

// shortPagemap is a page map that answers only the first entries of a
// read, as a page map read cut short would.
type shortPagemap struct{ entries int }

func (s shortPagemap) ReadAt(p []byte, off int64) (int, error) {
	n := min(len(p), 8*s.entries)
	for i := range n {
		p[i] = 0xff // present
	}
	return n, io.EOF
}

// A page map read cut short is an error, in pageFlags and in the save: its
// missing entries would read as untouched, and the guest's writes in those
// pages would become holes in the image.
func TestShortPagemapReadIsRefused(t *testing.T) {
	flags := make([]uint64, 8)
	err := pageFlags(shortPagemap{entries: 3}, 0, 8, flags)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("pageFlags over a short read = %v, want io.ErrUnexpectedEOF", err)
	}
	if err := pageFlags(shortPagemap{entries: 8}, 0, 8, flags); err != nil {
		t.Fatalf("pageFlags over a full read: %v", err)
	}

	const pages = 16
	mem := guestmem.New(pages * pageSize)
	if err := mem.WriteAt([]byte("the guest wrote this"), 12*pageSize); err != nil {
		t.Fatal(err)
	}
	layout := []snapshot.MemoryRegion{{GuestAddr: 0, Size: pages * pageSize}}
	f, err := os.Create(filepath.Join(t.TempDir(), "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w regionWriter
	err = w.write(f, mem, layout, shortPagemap{entries: 4}, nil, nil)
	if err == nil {
		b := make([]byte, 20)
		f.ReadAt(b, 12*pageSize)
		t.Fatalf("a save over a short page map read succeeded; the guest's page reads back %q", b)
	}
	t.Log(err)
}
