package boot

import "fmt"

// E820 entry types.
const (
	E820RAM      = 1
	E820Reserved = 2
)

// E820Entry is one range of the BIOS memory map.
type E820Entry struct {
	Addr, Size uint64
	Type       uint32
}

// MemoryMap returns the e820 map for a guest with memSize bytes of RAM laid
// out as RAMRegions describes.
func MemoryMap(memSize uint64) []E820Entry {
	m := []E820Entry{
		{0, EBDAStart, E820RAM},
		{EBDAStart, 0xa0000 - EBDAStart, E820Reserved},
	}
	for _, r := range RAMRegions(memSize) {
		start, end := r.Addr, r.Addr+r.Size
		if start < HighMemStart {
			start = HighMemStart
		}
		if end > start {
			m = append(m, E820Entry{start, end - start, E820RAM})
		}
	}
	return m
}

// RAMRegions splits memSize bytes of guest RAM around the MMIO gap below
// 4 GiB: RAM below 3 GiB, and the rest from 4 GiB up.
func RAMRegions(memSize uint64) []E820Entry {
	if memSize <= MMIOGapStart {
		return []E820Entry{{0, memSize, E820RAM}}
	}
	return []E820Entry{
		{0, MMIOGapStart, E820RAM},
		{MMIOGapEnd, memSize - MMIOGapStart, E820RAM},
	}
}

// checkMemSize refuses memory sizes the layout cannot hold.
func checkMemSize(memSize uint64) error {
	if memSize < 16<<20 {
		return fmt.Errorf("guest memory %d MiB is too small (at least 16 MiB)", memSize>>20)
	}
	return nil
}
