package block

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
