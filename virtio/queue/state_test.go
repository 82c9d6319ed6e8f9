package queue_test

import (
	"errors"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// copyMem is what a snapshot's memory file is: the guest's bytes at the
// moment of the save, in a memory of their own.
func copyMem(m *guestmem.Regions) *guestmem.Regions {
	c := guestmem.New(m.Size())
	copy(c.List()[0].Data, m.List()[0].Data)
	return c
}

// TestRestoreMidStream saves a queue with one chain done, one popped but
// put back, and one not yet looked at, and restores it over a copy of the
// memory: the restored queue serves the two outstanding chains, in order,
// and nothing twice.
func TestRestoreMidStream(t *testing.T) {
	mem, d, q := setup(t, 8, true, true)
	a := d.Post(virtiotest.W(4))
	b := d.Post(virtiotest.W(4))
	c := d.Post(virtiotest.W(4))
	ca, err := q.Pop(mem)
	if err != nil || ca.Head != a {
		t.Fatalf("Pop = %+v, %v", ca, err)
	}
	if err := q.Push(mem, a, 1); err != nil {
		t.Fatal(err)
	}
	if need, err := q.NeedsInterrupt(mem); err != nil || !need {
		t.Fatalf("NeedsInterrupt = %v, %v", need, err)
	}
	if cb, err := q.Pop(mem); err != nil || cb.Head != b {
		t.Fatalf("Pop = %+v, %v", cb, err)
	}
	q.UndoPop() // stopping for the snapshot with b in hand
	st := q.Save()
	if st.LastAvail != 1 || st.UsedIdx != 1 || st.Signalled != 1 {
		t.Fatalf("saved %+v", st)
	}

	mem2 := copyMem(mem)
	d.Mem, d.Heap.Mem = mem2, mem2
	if err := mem.WriteAt(make([]byte, memSize), 0); err != nil { // the old VM's memory is gone
		t.Fatal(err)
	}
	q2, err := queue.Restore(mem2, st, 256)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := d.Next(); !ok || u.ID != a || u.Len != 1 {
		t.Fatalf("the chain done before the save: %+v, %v", u, ok)
	}
	for i, want := range []uint16{b, c} {
		ch, err := q2.Pop(mem2)
		if err != nil || ch == nil || ch.Head != want {
			t.Fatalf("restored Pop %d = %+v, %v; want head %d", i, ch, err, want)
		}
		if err := q2.Push(mem2, ch.Head, uint32(10+i)); err != nil {
			t.Fatal(err)
		}
	}
	if ch, err := q2.Pop(mem2); ch != nil || err != nil {
		t.Fatalf("Pop after the outstanding chains = %+v, %v", ch, err)
	}
	// The driver asked for an interrupt at used entry 1, which the restored
	// queue has passed since it last signalled.
	if need, err := q2.NeedsInterrupt(mem2); err != nil || !need {
		t.Fatalf("restored NeedsInterrupt = %v, %v", need, err)
	}
	for i, want := range []uint16{b, c} {
		if u, ok := d.Next(); !ok || u.ID != want || u.Len != uint32(10+i) {
			t.Fatalf("used %d after restore: %+v, %v", i, u, ok)
		}
	}
}

func TestRestoreRefusesInconsistentState(t *testing.T) {
	mem, d, q := setup(t, 8, false, true)
	d.Post(virtiotest.W(4))
	ch, err := q.Pop(mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Push(mem, ch.Head, 0); err != nil {
		t.Fatal(err)
	}
	st := q.Save()

	stale := st
	stale.UsedIdx = 0 // a state file from another moment than the memory
	if _, err := queue.Restore(mem, stale, 256); !errors.Is(err, queue.ErrMalformed) {
		t.Errorf("used idx mismatch: %v, want ErrMalformed", err)
	}
	bad := st
	bad.Config.Size = 6
	if _, err := queue.Restore(mem, bad, 256); !errors.Is(err, queue.ErrMalformed) {
		t.Errorf("queue size 6: %v, want ErrMalformed", err)
	}
	outside := st
	outside.Config.DeviceAddr = memSize - 8
	if _, err := queue.Restore(mem, outside, 256); !errors.Is(err, queue.ErrMalformed) {
		t.Errorf("used ring outside memory: %v, want ErrMalformed", err)
	}
	if _, err := queue.Restore(mem, st, 4); !errors.Is(err, queue.ErrMalformed) {
		t.Errorf("queue larger than the device's maximum: %v, want ErrMalformed", err)
	}
}

func TestNotifyOnNext(t *testing.T) {
	mem, d, q := setup(t, 8, false, true)
	for range 3 {
		d.Post(virtiotest.W(4))
	}
	if _, err := q.Pop(mem); err != nil {
		t.Fatal(err)
	}
	if err := q.NotifyOnNext(mem); err != nil {
		t.Fatal(err)
	}
	// Two chains are still available, yet the driver's next one must be
	// notified: avail_event is the index it will publish next.
	if got := d.AvailEvent(); got != 3 {
		t.Fatalf("avail_event %d, want 3", got)
	}
	if !queue.NeedEvent(d.AvailEvent(), 4, 3) {
		t.Fatal("the driver's next publish would not notify")
	}
}
