package guestmem

import "sync/atomic"

// The devices' dirty log. KVM logs the pages the guest writes (package
// kvm's dirty log); it cannot see what the VMM's own devices write into
// guest memory from the host side (a used ring, a block read's data, a
// received packet). A checkpoint needs both, so Regions keeps a bitmap of
// the pages devices write, in KVM's layout (one bit per 4 KiB page of a
// region, bit p of word p/64), which a device sets through MarkDirty
// before it writes. It is off until EnableDirtyLog: a machine that takes
// no checkpoints pays one nil check per write.
//
// A device marks before it writes, so that a checkpoint that drains the
// devices (every write done) and then takes the bitmap holds every page
// they wrote.

// PageSize is the dirty log's page.
const PageSize = 4096

// DirtyMarker is memory that logs the pages devices write: Memory
// implementations that keep no log need not implement it.
type DirtyMarker interface {
	// MarkDirty records that [addr, addr+n) is being written.
	MarkDirty(addr, n uint64)
}

// MarkDirty records, in m's dirty log when it keeps one, that a device
// writes [addr, addr+n) of guest memory.
func MarkDirty(m Memory, addr, n uint64) {
	if d, ok := m.(DirtyMarker); ok {
		d.MarkDirty(addr, n)
	}
}

// EnableDirtyLog turns the devices' dirty log on, empty. A machine calls
// it before any device runs; a mark that races it (a test's device
// already polling its queue) is either not logged or logged, never half.
func (m *Regions) EnableDirtyLog() {
	log := make([][]atomic.Uint64, len(m.regs))
	for i, r := range m.regs {
		pages := (uint64(len(r.Data)) + PageSize - 1) / PageSize
		log[i] = make([]atomic.Uint64, (pages+63)/64)
	}
	m.dirty.Store(&log)
}

// DirtyLogEnabled says whether EnableDirtyLog was called.
func (m *Regions) DirtyLogEnabled() bool { return m.dirty.Load() != nil }

// dirtyLog is the log, nil when off.
func (m *Regions) dirtyLog() [][]atomic.Uint64 {
	if p := m.dirty.Load(); p != nil {
		return *p
	}
	return nil
}

// MarkDirty implements DirtyMarker: it sets the bits of the pages that
// [addr, addr+n) touches, in each region it overlaps. An address outside
// guest memory marks nothing (the access itself fails).
func (m *Regions) MarkDirty(addr, n uint64) {
	dirty := m.dirtyLog()
	if dirty == nil || n == 0 {
		return
	}
	end := addr + n
	if end < addr {
		end = ^uint64(0)
	}
	for i, r := range m.regs {
		rEnd := r.GuestAddr + uint64(len(r.Data))
		lo, hi := max(addr, r.GuestAddr), min(end, rEnd)
		if lo >= hi {
			continue
		}
		bm := dirty[i]
		for p := (lo - r.GuestAddr) / PageSize; p <= (hi-1-r.GuestAddr)/PageSize; p++ {
			w := &bm[p/64]
			if bit := uint64(1) << (p % 64); w.Load()&bit == 0 {
				w.Or(bit)
			}
		}
	}
}

// TakeDirtyLog returns region i's bitmap of the pages devices wrote since
// the last take, and clears it (nil when the log is off or i is not a
// region). A mark that races the take lands in one or the other.
func (m *Regions) TakeDirtyLog(i int) []uint64 {
	dirty := m.dirtyLog()
	if dirty == nil || i < 0 || i >= len(dirty) {
		return nil
	}
	out := make([]uint64, len(dirty[i]))
	for w := range dirty[i] {
		out[w] = dirty[i][w].Swap(0)
	}
	return out
}

// RestoreDirtyLog ORs bitmap back into region i's log: a checkpoint that
// failed gives back the pages it took, so that the next one writes them.
func (m *Regions) RestoreDirtyLog(i int, bitmap []uint64) {
	dirty := m.dirtyLog()
	if dirty == nil || i < 0 || i >= len(dirty) {
		return
	}
	for w, bits := range bitmap {
		if w < len(dirty[i]) && bits != 0 {
			dirty[i][w].Or(bits)
		}
	}
}
