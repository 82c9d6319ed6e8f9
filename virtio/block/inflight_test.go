package block

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/queue"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// gatedStore is a disk whose reads wait for the test: each read announces
// its offset on started and returns once its gate is opened.
type gatedStore struct {
	mu       sync.Mutex
	gates    map[int64]chan struct{}
	started  chan int64
	cur, max int
}

func newGatedStore() *gatedStore {
	return &gatedStore{gates: map[int64]chan struct{}{}, started: make(chan int64, 64)}
}

func (s *gatedStore) gate(off int64) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gates[off]
	if g == nil {
		g = make(chan struct{})
		s.gates[off] = g
	}
	return g
}

func (s *gatedStore) readv(bufs [][]byte, off int64) error {
	s.mu.Lock()
	s.cur++
	s.max = max(s.max, s.cur)
	s.mu.Unlock()
	s.started <- off
	<-s.gate(off)
	for _, b := range bufs {
		for i := range b {
			b[i] = byte(off / SectorSize)
		}
	}
	s.mu.Lock()
	s.cur--
	s.mu.Unlock()
	return nil
}

func (s *gatedStore) writev([][]byte, int64) error { return nil }
func (s *gatedStore) sync() error                  { return nil }

func (s *gatedStore) waitStarted(t *testing.T) int64 {
	t.Helper()
	select {
	case off := <-s.started:
		return off
	case <-time.After(5 * time.Second):
		t.Fatal("no read started")
		return 0
	}
}

func gatedDisk(t *testing.T) (*Block, *gatedStore) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, 64*SectorSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(f, true, "gated", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newGatedStore()
	b.store = s
	return b, s
}

func readReq(sector uint64) []virtiotest.Seg {
	h := make([]byte, headerLen)
	binary.LittleEndian.PutUint32(h[0:], TypeIn)
	binary.LittleEndian.PutUint64(h[8:], sector)
	return []virtiotest.Seg{virtiotest.R(h), virtiotest.W(SectorSize), virtiotest.W(1)}
}

// TestRequestsInFlightCompleteOutOfOrder: a read that waits on the disk
// does not hold up the one posted after it, which completes first.
func TestRequestsInFlightCompleteOutOfOrder(t *testing.T) {
	b, s := gatedDisk(t)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	slow := h.Queues[0].Post(readReq(0)...)
	fast := h.Queues[0].Post(readReq(1)...)
	h.Kick(0)
	for range 2 {
		s.waitStarted(t) // both are at the disk at once
	}
	close(s.gate(SectorSize))
	if u := h.Wait(0, 5*time.Second); u.ID != fast || u.Data[0] != 1 || u.Data[SectorSize] != StatusOK {
		t.Fatalf("first completion %d (want %d, the fast one), data %d status %d", u.ID, fast, u.Data[0], u.Data[SectorSize])
	}
	close(s.gate(0))
	if u := h.Wait(0, 5*time.Second); u.ID != slow || u.Data[0] != 0 || u.Data[SectorSize] != StatusOK {
		t.Fatalf("second completion %d (want %d), status %d", u.ID, slow, u.Data[SectorSize])
	}
}

// TestInFlightIsBounded: a guest posting more requests than the bound gets
// at most maxInFlight at the disk at once; the rest wait in its ring and
// are all served once the disk answers.
func TestInFlightIsBounded(t *testing.T) {
	b, s := gatedDisk(t)
	h := virtiotest.Start(t, b, ^uint64(0), 128)
	const n = maxInFlight + 12
	for i := range n {
		h.Queues[0].Post(readReq(uint64(i))...)
	}
	h.Kick(0)
	for range maxInFlight {
		s.waitStarted(t)
	}
	for i := range n {
		close(s.gate(int64(i) * SectorSize))
	}
	seen := map[uint16]bool{}
	for range n {
		u := h.Wait(0, 5*time.Second)
		if seen[u.ID] || u.Data[SectorSize] != StatusOK {
			t.Fatalf("completion %d: again %v, status %d", u.ID, seen[u.ID], u.Data[SectorSize])
		}
		seen[u.ID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.max != maxInFlight {
		t.Fatalf("%d reads at the disk at once, want the bound %d", s.max, maxInFlight)
	}
}

// TestPauseDrainsRequestsInFlight: a pause (for a snapshot) waits for the
// requests at the disk and pushes them, so the saved queue has nothing
// popped and not pushed; a request posted while paused is left in the ring
// for the resumed (or restored) device.
func TestPauseDrainsRequestsInFlight(t *testing.T) {
	b, s := gatedDisk(t)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	for i := range 3 {
		h.Queues[0].Post(readReq(uint64(i))...)
	}
	h.Kick(0)
	for range 3 {
		s.waitStarted(t)
	}
	paused := make(chan error)
	go func() { paused <- h.MMIO.Pause() }()
	select {
	case err := <-paused:
		t.Fatalf("pause returned (%v) with three reads at the disk", err)
	case <-time.After(50 * time.Millisecond):
	}
	for i := range 3 {
		close(s.gate(int64(i) * SectorSize))
	}
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	if n := h.Queues[0].Pending(); n != 3 {
		t.Fatalf("%d requests pushed by the pause, want 3", n)
	}
	later := h.Queues[0].Post(readReq(3)...)
	h.Kick(0)
	st, err := h.MMIO.Save()
	if err != nil {
		t.Fatal(err)
	}
	if q := st.Live[0]; q.LastAvail != 3 || q.UsedIdx != 3 {
		t.Fatalf("saved queue: last avail %d, used %d; want 3 and 3", q.LastAvail, q.UsedIdx)
	}
	close(s.gate(3 * SectorSize))
	h.MMIO.Resume()
	for range 3 {
		h.Wait(0, 5*time.Second)
	}
	if u := h.Wait(0, 5*time.Second); u.ID != later || u.Data[0] != 3 {
		t.Fatalf("after resume: completion %d (want %d), data %d", u.ID, later, u.Data[0])
	}
}

// TestEventIdxSuppression is virtio 1.2, 2.7.10 at the device: while the
// device works through its ring it leaves avail_event behind, so a driver
// posting more does not notify (and loses nothing: the device looks at the
// ring after each completion); once the ring is empty it sets avail_event to
// ask for the next notification. Interrupts follow used_event: a batch of
// completions that does not pass it raises none.
func TestEventIdxSuppression(t *testing.T) {
	b, s := gatedDisk(t)
	h := virtiotest.Start(t, b, ^uint64(0), 128)
	d := h.Queues[0]
	const first, extra = maxInFlight + 2, 4
	d.SetUsedEvent(first + extra - 1) // one interrupt, at the last completion
	for i := range first {
		d.Post(readReq(uint64(i))...)
	}
	h.Kick(0)
	for range maxInFlight {
		s.waitStarted(t)
	}
	ev := d.AvailEvent()
	for i := range extra {
		old := uint16(first + i)
		d.Post(readReq(uint64(first + i))...)
		if queue.NeedEvent(d.AvailEvent(), old+1, old) {
			t.Fatalf("avail_event %d asks for a notification of entry %d while the device is busy", d.AvailEvent(), old)
		}
	}
	if d.AvailEvent() != ev {
		t.Fatalf("avail_event moved from %d to %d while the device was busy", ev, d.AvailEvent())
	}
	irqs := h.Irq.Count()
	for i := range first + extra {
		close(s.gate(int64(i) * SectorSize))
	}
	// Taking used entries moves used_event (as Linux does), so wait for
	// all of them to be pushed before taking any.
	eventually(t, "all completions pushed", func() bool { return d.Pending() == first+extra })
	if got := h.Irq.Count() - irqs; got != 1 {
		t.Fatalf("%d interrupts for %d completions with used_event at the last, want 1", got, first+extra)
	}
	for range first + extra {
		if u, _ := d.Next(); u.Data[SectorSize] != StatusOK {
			t.Fatalf("completion %d: status %d", u.ID, u.Data[SectorSize])
		}
	}
	// The ring is empty: the next entry must be notified.
	eventually(t, "avail_event at the next entry", func() bool { return d.AvailEvent() == first+extra })
}

// eventually waits for cond, which the device's goroutines make true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s within 5s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
