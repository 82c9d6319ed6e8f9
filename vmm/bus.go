package vmm

import (
	"fmt"
	"sort"
	"sync"
)

// BusDevice handles guest accesses to a range of port or MMIO addresses;
// offset is relative to the start of the range.
type BusDevice interface {
	Read(offset uint64, data []byte)
	Write(offset uint64, data []byte)
}

type busRange struct {
	base, size uint64
	dev        BusDevice
}

// Bus maps address ranges to devices. Lookups run on every exit, ranges are
// added before the vCPUs start.
type Bus struct {
	mu     sync.RWMutex
	ranges []busRange
}

// Add maps [base, base+size) to dev.
func (b *Bus) Add(base, size uint64, dev BusDevice) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if size == 0 || base+size < base {
		return fmt.Errorf("bad bus range %#x+%#x", base, size)
	}
	for _, r := range b.ranges {
		if base < r.base+r.size && r.base < base+size {
			return fmt.Errorf("bus range %#x+%#x overlaps %#x+%#x", base, size, r.base, r.size)
		}
	}
	b.ranges = append(b.ranges, busRange{base, size, dev})
	sort.Slice(b.ranges, func(i, j int) bool { return b.ranges[i].base < b.ranges[j].base })
	return nil
}

// find returns the device at addr and addr's offset in its range.
func (b *Bus) find(addr uint64, n int) (BusDevice, uint64, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	i := sort.Search(len(b.ranges), func(i int) bool { return b.ranges[i].base+b.ranges[i].size > addr })
	if i == len(b.ranges) {
		return nil, 0, false
	}
	r := b.ranges[i]
	if addr < r.base || addr-r.base+uint64(n) > r.size {
		return nil, 0, false
	}
	return r.dev, addr - r.base, true
}

// Read dispatches a read; unclaimed addresses read as zero. It reports
// whether a device claimed the access.
func (b *Bus) Read(addr uint64, data []byte) bool {
	dev, off, ok := b.find(addr, len(data))
	if !ok {
		clear(data)
		return false
	}
	dev.Read(off, data)
	return true
}

// Write dispatches a write; unclaimed writes are dropped. It reports whether
// a device claimed the access.
func (b *Bus) Write(addr uint64, data []byte) bool {
	dev, off, ok := b.find(addr, len(data))
	if !ok {
		return false
	}
	dev.Write(off, data)
	return true
}
