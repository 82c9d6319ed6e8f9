package block_test

import (
	"slices"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/block"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// TestReadMarksGuestBuffers: a read's data lands in guest memory by a
// vectored read of the disk (preadv), which no CPU store of the VMM's
// makes: its pages, the status byte's and the used ring's are marked in
// the devices' dirty log; the request's header (read by the device) is
// not.
func TestReadMarksGuestBuffers(t *testing.T) {
	b, _ := disk(t, false)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	h.LogDeviceWrites()
	d := h.Queues[0]
	hdr := h.Heap.Alloc(4096, 4096)
	if err := d.Mem.WriteAt(header(block.TypeIn, 2), hdr); err != nil {
		t.Fatal(err)
	}
	data := h.Heap.Alloc(2*4096, 4096)
	st := h.Heap.Alloc(4096, 4096)
	d.PostBufs(virtiotest.Buf{Addr: hdr, Len: 16}, virtiotest.Buf{Addr: data, Len: 2 * 4096, Write: true}, virtiotest.Buf{Addr: st, Len: 1, Write: true})
	h.Kick(0)
	if u := h.Wait(0, 5*time.Second); status(t, u) != block.StatusOK {
		t.Fatalf("status %d", status(t, u))
	}
	got := h.DirtyPages()
	for _, p := range append(virtiotest.Pages(data, 2*4096), st/4096, d.UsedRingPages()[0]) {
		if !slices.Contains(got, p) {
			t.Errorf("page %#x not marked; marked %#x", p, got)
		}
	}
	if slices.Contains(got, hdr/4096) {
		t.Errorf("the header's page %#x, which the device only read, is marked", hdr/4096)
	}
	if !virtiotest.Subset(got, virtiotest.Pages(data, 2*4096), []uint64{st / 4096}, d.UsedRingPages()) {
		t.Errorf("marked %#x: more than the request's writable buffers and the used ring", got)
	}
}
