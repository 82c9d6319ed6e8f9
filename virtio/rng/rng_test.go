package rng_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

func TestFillsRequests(t *testing.T) {
	h := virtiotest.Start(t, rng.New(nil), ^uint64(0), 16)
	head := h.Post(0, virtiotest.W(64), virtiotest.W(64))
	u := h.Wait(0, 5*time.Second)
	if u.ID != head || u.Len != 128 || len(u.Data) != 128 {
		t.Fatalf("used = id %d len %d", u.ID, u.Len)
	}
	if bytes.Equal(u.Data, make([]byte, 128)) {
		t.Fatal("entropy is all zero")
	}
	// A second request gets different bytes.
	h.Post(0, virtiotest.W(128))
	if u2 := h.Wait(0, 5*time.Second); bytes.Equal(u.Data, u2.Data) {
		t.Fatal("two requests got the same bytes")
	}
	if h.Features&(1<<29) == 0 {
		t.Fatal("EVENT_IDX not negotiated")
	}
	// With EVENT_IDX the driver re-arms used_event after each entry, so
	// each request gets its interrupt.
	for range 3 {
		before := h.Irq.Count()
		h.Post(0, virtiotest.W(8))
		h.Wait(0, 5*time.Second)
		// The entry can be seen (polling) just before the interrupt fires.
		deadline := time.Now().Add(2 * time.Second)
		for h.Irq.Count() == before {
			if time.Now().After(deadline) {
				t.Fatal("no interrupt for a completed request")
			}
			time.Sleep(time.Millisecond)
		}
	}
}

func TestLargeRequestIsCapped(t *testing.T) {
	h := virtiotest.Start(t, rng.New(nil), ^uint64(0), 16)
	h.Post(0, virtiotest.W(1<<20))
	if u := h.Wait(0, 5*time.Second); u.Len != 64<<10 {
		t.Fatalf("filled %d bytes, want 64 KiB", u.Len)
	}
}

func TestBrokenChainNeedsReset(t *testing.T) {
	h := virtiotest.Start(t, rng.New(nil), ^uint64(0), 16)
	d := h.Queues[0]
	d.WriteDesc(d.Desc, 0, 0, 8, 1 /* NEXT */, 0) // loops on itself
	d.Publish(0)
	h.Kick(0)
	deadline := time.Now().Add(5 * time.Second)
	for !h.NeedsReset() {
		if time.Now().After(deadline) {
			t.Fatal("looping chain did not set DEVICE_NEEDS_RESET")
		}
		time.Sleep(time.Millisecond)
	}
	if h.Read32(0x60)&2 == 0 {
		t.Fatal("no config-change interrupt status")
	}
}
