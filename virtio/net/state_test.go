package net

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// logWatch is a slog handler that hands each message to a channel, so a
// test can wait for the device to have done something it only logs.
type logWatch struct{ msgs chan string }

func (w logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w logWatch) Handle(_ context.Context, r slog.Record) error {
	select {
	case w.msgs <- r.Message:
	default:
	}
	return nil
}
func (w logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w logWatch) WithGroup(string) slog.Handler      { return w }

func (w logWatch) waitFor(t *testing.T, sub string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-w.msgs:
			if strings.Contains(m, sub) {
				return
			}
		case <-deadline:
			t.Fatalf("the device never logged %q", sub)
		}
	}
}

// TestRestoreKeepsHeldRxBuffer snapshots the NIC while its rx goroutine
// holds a guest buffer (a frame too big for it was just dropped): the
// buffer goes back to the ring, and the restored NIC delivers the next
// frame into it.
func TestRestoreKeepsHeldRxBuffer(t *testing.T) {
	watch := logWatch{msgs: make(chan string, 16)}
	tap := newFakeTAP()
	mac := [6]byte{2, 0, 0, 0, 0, 9}
	dev := New(tap, mac, slog.New(watch))
	h := virtiotest.Start(t, dev, ^uint64(0), 64)
	buf := h.Post(rxQueue, virtiotest.W(HeaderLen+100))
	tap.toGuest <- frame(string(make([]byte, 300)))
	watch.waitFor(t, "larger than the rx buffer")

	st, mem := h.Snapshot()
	saved := dev.Save()
	if saved.MAC != mac {
		t.Fatalf("saved %+v", saved)
	}
	if st.Live[rxQueue].LastAvail != 0 {
		t.Fatalf("the held rx buffer was not put back: last_avail %d", st.Live[rxQueue].LastAvail)
	}
	tap2 := newFakeTAP()
	dev2 := New(tap2, mac, nil)
	if err := dev2.Restore(saved); err != nil {
		t.Fatal(err)
	}
	r := h.Restore(dev2, st, mem)
	tap2.toGuest <- frame("after restore")
	u := r.Wait(rxQueue, 5*time.Second)
	if u.ID != buf || string(u.Data[HeaderLen:]) != "after restore" {
		t.Fatalf("restored NIC delivered %q into buffer %d (want %d)", u.Data, u.ID, buf)
	}
	// tx carries on too.
	f := frame("from the fork")
	r.Post(txQueue, virtiotest.R(f))
	select {
	case got := <-tap2.fromDev:
		if !bytes.Equal(got, f) {
			t.Fatalf("TAP got %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the restored NIC sent nothing")
	}
	if err := New(newFakeTAP(), [6]byte{2, 0, 0, 0, 0, 8}, nil).Restore(saved); err == nil {
		t.Error("restore onto a NIC with another MAC succeeded")
	}
}
