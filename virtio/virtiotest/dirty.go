package virtiotest

import (
	"slices"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/kvm"
)

// LogDeviceWrites turns on h.Mem's dirty log (guestmem's dirty.go), for a
// test of the pages a device marks. The heap and the drivers then write
// through a view of the same memory that keeps no log, as a guest's
// writes never reach it, so the log holds the device's writes alone. Call
// it after Start and before posting anything.
func (h *Harness) LogDeviceWrites() {
	view, err := guestmem.FromRegions(h.Mem.List()...)
	if err != nil {
		h.tb.Fatalf("view of guest memory: %v", err)
	}
	h.Heap.Mem = view
	for _, d := range h.Queues {
		d.Mem = view
	}
	h.Mem.EnableDirtyLog()
}

// DirtyPages takes the dirty log: the guest pages (address / 4096) that
// devices marked since the last call, in order.
func (h *Harness) DirtyPages() []uint64 {
	var out []uint64
	for i, r := range h.Mem.List() {
		bm := h.Mem.TakeDirtyLog(i)
		kvm.DirtyPages(bm, len(r.Data)/guestmem.PageSize, func(p int) {
			out = append(out, r.GuestAddr/guestmem.PageSize+uint64(p))
		})
	}
	return out
}

// Pages lists the guest pages [addr, addr+n) touches.
func Pages(addr, n uint64) []uint64 {
	var out []uint64
	for p := addr / guestmem.PageSize; p <= (addr+n-1)/guestmem.PageSize; p++ {
		out = append(out, p)
	}
	return out
}

// UsedRingPages are the pages of d's used ring (where a device writes its
// used elements, used idx and avail_event).
func (d *Driver) UsedRingPages() []uint64 {
	return Pages(d.Used, 4+8*uint64(d.Size)+2)
}

// Subset says whether every page of got is in one of allowed.
func Subset(got []uint64, allowed ...[]uint64) bool {
	for _, p := range got {
		ok := false
		for _, a := range allowed {
			ok = ok || slices.Contains(a, p)
		}
		if !ok {
			return false
		}
	}
	return true
}
