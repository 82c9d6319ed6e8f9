package virtiotest

import (
	"maps"
	"slices"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/mmio"
)

// Snapshot pauses the harness's device and returns what a snapshot of it
// holds: the transport's state and a copy of guest memory. The device
// stays paused; h.MMIO.Resume carries on.
func (h *Harness) Snapshot() (mmio.State, *guestmem.Regions) {
	h.tb.Helper()
	if err := h.MMIO.Pause(); err != nil {
		h.tb.Fatalf("pause: %v", err)
	}
	st, err := h.MMIO.Save()
	if err != nil {
		h.tb.Fatalf("save: %v", err)
	}
	mem := guestmem.New(h.Mem.Size())
	copy(mem.List()[0].Data, h.Mem.List()[0].Data)
	return st, mem
}

// Restore puts dev (whose own state the caller has restored) behind a new
// transport over mem in state st, as a restored VMM does, and returns a
// harness whose drivers carry on from h's as the guest in the snapshot
// would. Both harnesses may go on independently, like a VM and its fork.
func (h *Harness) Restore(dev virtio.Device, st mmio.State, mem *guestmem.Regions) *Harness {
	h.tb.Helper()
	r := &Harness{tb: h.tb, Mem: mem, Heap: h.Heap.clone(mem), Irq: NewIrq(), Features: h.Features}
	r.MMIO = mmio.NewMMIO(dev, mem, r.Irq, nil)
	h.tb.Cleanup(func() {
		if err := r.MMIO.Close(); err != nil {
			h.tb.Errorf("close restored transport: %v", err)
		}
	})
	if err := r.MMIO.Restore(st); err != nil {
		h.tb.Fatalf("restore: %v", err)
	}
	if err := r.MMIO.Start(); err != nil {
		h.tb.Fatalf("start the restored transport: %v", err)
	}
	for _, d := range h.Queues {
		r.Queues = append(r.Queues, d.clone(r.Heap))
	}
	return r
}

func (h *Heap) clone(mem guestmem.Memory) *Heap {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &Heap{tb: h.tb, Mem: mem, next: h.next, end: h.end}
}

// clone is d's driver state over heap's memory.
func (d *Driver) clone(heap *Heap) *Driver {
	c := *d
	c.Heap, c.Mem = heap, heap.Mem
	c.free = slices.Clone(d.free)
	c.writable = maps.Clone(d.writable)
	c.descs = maps.Clone(d.descs)
	for k, v := range c.writable {
		c.writable[k] = slices.Clone(v)
	}
	for k, v := range c.descs {
		c.descs[k] = slices.Clone(v)
	}
	return &c
}
