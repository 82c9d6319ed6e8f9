package rng_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// TestRestoreMidStream posts a request to a paused device and snapshots
// it: the restored device and the resumed original each fill it, with
// different bytes (a fork gets its own entropy).
func TestRestoreMidStream(t *testing.T) {
	dev := rng.New(nil)
	h := virtiotest.Start(t, dev, ^uint64(0), 16)
	h.Post(0, virtiotest.W(32))
	h.Wait(0, 5*time.Second)
	if err := h.MMIO.Pause(); err != nil {
		t.Fatal(err)
	}
	head := h.Post(0, virtiotest.W(64))
	st, mem := h.Snapshot()
	dev2 := rng.New(nil)
	if err := dev2.Restore(dev.Save()); err != nil {
		t.Fatal(err)
	}
	r := h.Restore(dev2, st, mem)
	u := r.Wait(0, 5*time.Second)
	if u.ID != head || u.Len != 64 || bytes.Equal(u.Data, make([]byte, 64)) {
		t.Fatalf("restored device: id %d (want %d) len %d", u.ID, head, u.Len)
	}
	h.MMIO.Resume()
	orig := h.Wait(0, 5*time.Second)
	if orig.ID != head || bytes.Equal(orig.Data, u.Data) {
		t.Fatalf("original after resume: id %d, same bytes as the fork: %v", orig.ID, bytes.Equal(orig.Data, u.Data))
	}
}
