package rng_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// TestMarksWrittenPages: with the devices' dirty log on, a request marks
// every page of its buffer that the device filled and the used ring's
// page, and nothing the device did not write.
func TestMarksWrittenPages(t *testing.T) {
	h := virtiotest.Start(t, rng.New(nil), ^uint64(0), 16)
	h.LogDeviceWrites()
	d := h.Queues[0]
	buf := h.Heap.Alloc(3*4096, 4096) + 4000 // straddles 4 pages, filled 64 KiB max
	d.PostBufs(virtiotest.Buf{Addr: buf, Len: 2 * 4096, Write: true})
	h.Kick(0)
	h.Wait(0, 5*time.Second)
	got := h.DirtyPages()
	want := virtiotest.Pages(buf, 2*4096)
	for _, p := range append(want, d.UsedRingPages()[0]) {
		if !slices.Contains(got, p) {
			t.Errorf("page %#x not marked; marked %#x", p, got)
		}
	}
	if !virtiotest.Subset(got, want, d.UsedRingPages()) {
		t.Errorf("marked %#x: more than the buffer %#x and the used ring %#x", got, want, d.UsedRingPages())
	}
	if again := h.DirtyPages(); len(again) != 0 {
		t.Errorf("the log was not cleared by its take: %#x", again)
	}
}
