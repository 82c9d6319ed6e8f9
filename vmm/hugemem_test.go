package vmm

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestHugeSlack(t *testing.T) {
	for _, c := range []struct{ base, head uintptr }{
		{0x7f0000000000, 0},                     // aligned already: all the slack after
		{0x7f0000001000, hugePageSize - 0x1000}, // one page past a boundary
		{0x7f00001ff000, 0x1000},                // one page before one
		{0x7f0000100000, 1 << 20},
	} {
		head, tail := hugeSlack(c.base)
		if head != c.head || head+tail != hugePageSize || (c.base+head)%hugePageSize != 0 {
			t.Errorf("base %#x: head %#x tail %#x; want head %#x, the two making 2 MiB, and the RAM on a boundary", c.base, head, tail, c.head)
		}
	}
}

// Guest RAM starts on a 2 MiB boundary, is as long as asked, takes
// writes, and is gone once unmapped.
func TestGuestRAMIsHugePageAligned(t *testing.T) {
	for _, size := range []uint64{4096, 3 << 20, 64 << 20} {
		data, unmap, err := mmapGuestRAM(size)
		if err != nil {
			t.Fatal(err)
		}
		if addr := uintptrOf(data); addr%hugePageSize != 0 {
			t.Errorf("%d bytes of guest RAM at %#x: not on a 2 MiB boundary", size, addr)
		}
		if uint64(len(data)) != size {
			t.Errorf("got %d bytes, asked for %d", len(data), size)
		}
		data[0], data[len(data)-1] = 1, 2
		// madvise answers ENOMEM for a range that is not all mapped.
		if err := unix.Madvise(data, unix.MADV_NORMAL); err != nil {
			t.Fatalf("madvise of the mapped RAM: %v", err)
		}
		unmap()
		if err := unix.Madvise(data, unix.MADV_NORMAL); !errors.Is(err, unix.ENOMEM) {
			t.Errorf("madvise after unmap: %v, want ENOMEM (unmapped)", err)
		}
	}
	if _, _, err := mmapGuestRAM(1000); err == nil {
		t.Error("guest RAM of 1000 bytes (not whole pages) was mapped")
	}
}

// Guest RAM is marked for huge pages: smaps shows "hg" in its VmFlags.
func TestGuestRAMAsksForHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("this kernel has no transparent huge pages")
	}
	data, unmap, err := mmapGuestRAM(6 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	if flags := vmFlagsAt(string(smaps), uintptrOf(data)); !slices.Contains(flags, "hg") {
		t.Errorf("guest RAM at %#x: VmFlags %v, want hg (MADV_HUGEPAGE)", uintptrOf(data), flags)
	}
}

// vmFlagsAt returns the VmFlags of the smaps mapping that starts at addr.
func vmFlagsAt(smaps string, addr uintptr) []string {
	in := false
	for _, line := range strings.Split(smaps, "\n") {
		if lo, _, ok := strings.Cut(line, "-"); ok && !strings.Contains(lo, " ") && !strings.Contains(lo, ":") {
			start, err := strconv.ParseUint(lo, 16, 64)
			in = err == nil && uintptr(start) == addr
			continue
		}
		if f, ok := strings.CutPrefix(line, "VmFlags:"); ok && in {
			return strings.Fields(f)
		}
	}
	return nil
}
