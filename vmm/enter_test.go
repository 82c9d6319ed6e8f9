package vmm

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/mmio"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/virtiotest"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// touchCounter is guest memory that counts every access.
type touchCounter struct {
	guestmem.Memory
	n atomic.Int64
}

func (c *touchCounter) ReadAt(p []byte, addr uint64) error {
	c.n.Add(1)
	return c.Memory.ReadAt(p, addr)
}
func (c *touchCounter) WriteAt(p []byte, addr uint64) error {
	c.n.Add(1)
	return c.Memory.WriteAt(p, addr)
}
func (c *touchCounter) Slice(addr, n uint64) ([]byte, error) {
	c.n.Add(1)
	return c.Memory.Slice(addr, n)
}

// restoredMachine is a machine as Restore leaves it, short of KVM: one
// virtio-rng restored from a running one's snapshot, into its struct only,
// over guest memory that counts its accesses.
func restoredMachine(t *testing.T, beforeGuest func() error) (*Machine, *touchCounter) {
	t.Helper()
	h := virtiotest.Start(t, rng.New(nil), ^uint64(0), 32)
	h.Queues[0].Post(virtiotest.W(16)) // a chain the restored device will find
	st, mem := h.Snapshot()
	mem2 := &touchCounter{Memory: mem}
	dev := rng.New(nil)
	tr := mmio.NewMMIO(dev, mem2, virtiotest.NewIrq(), nil)
	t.Cleanup(func() { tr.Close() })
	m := &Machine{cfg: Config{BeforeGuest: beforeGuest}}
	m.life.ended = make(chan struct{})
	tr.SetQueueGate(m.passQueueGate)
	m.snap.devices = []*virtioSlot{{dev: dev, t: tr, base: 0xd0000000, gsi: 5}}
	if err := restoreDevice(m.snap.devices[0], &snapshot.Device{Kind: snapshot.KindRNG, RNG: &rng.State{}, Transport: st}); err != nil {
		t.Fatal(err)
	}
	if err := m.restoredFrom(&snapshot.State{}); err != nil {
		t.Fatal(err)
	}
	return m, mem2
}

// TestRestoredDevicesStartAfterTheJail: a restored machine's devices read
// nothing of guest memory until BeforeGuest (the jail) has run; then they
// start. The order every restore path (fork, template, resume) takes.
func TestRestoredDevicesStartAfterTheJail(t *testing.T) {
	var mem *touchCounter
	var atJail int64 = -1
	m, mem := restoredMachine(t, func() error {
		atJail = mem.n.Load()
		return nil
	})
	if n := mem.n.Load(); n != 0 {
		t.Fatalf("the restore made %d accesses to guest memory before the jail", n)
	}
	if err := m.enterGuest(); err != nil {
		t.Fatal(err)
	}
	if atJail != 0 {
		t.Fatalf("at BeforeGuest (the jail) guest memory had had %d accesses, want 0", atJail)
	}
	if mem.n.Load() == 0 {
		t.Fatal("the restored device did not start after the jail")
	}
}

// TestNoDeviceStartsWhenTheJailFails: a BeforeGuest that fails leaves
// every restored device unstarted, guest memory untouched.
func TestNoDeviceStartsWhenTheJailFails(t *testing.T) {
	jailErr := errors.New("drop failed")
	m, mem := restoredMachine(t, func() error { return jailErr })
	if err := m.enterGuest(); !errors.Is(err, jailErr) {
		t.Fatalf("enterGuest = %v, want the jail's error", err)
	}
	if n := mem.n.Load(); n != 0 {
		t.Fatalf("%d accesses to guest memory after a failed jail", n)
	}
}

// TestQueueGateOnceAndEnds: the gate runs once for every device; its
// refusal keeps the restored device from starting (no memory read) and
// ends the machine.
func TestQueueGateOnceAndEnds(t *testing.T) {
	m, mem := restoredMachine(t, nil)
	var calls atomic.Int32
	refused := errors.New("uid 0, seccomp 0")
	m.cfg.QueueGate = func() error { calls.Add(1); return refused }
	if err := m.enterGuest(); !errors.Is(err, refused) {
		t.Fatalf("enterGuest = %v, want the gate's refusal", err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := m.passQueueGate(); !errors.Is(err, refused) {
				t.Errorf("later gate = %v, want the first verdict", err)
			}
		}()
	}
	wg.Wait()
	if calls.Load() != 1 {
		t.Fatalf("QueueGate ran %d times, want once", calls.Load())
	}
	if n := mem.n.Load(); n != 0 {
		t.Fatalf("%d accesses to guest memory past a refusing gate", n)
	}
	<-m.life.ended
	if !errors.Is(m.life.endErr, refused) {
		t.Fatalf("machine ended with %v, want the gate's refusal", m.life.endErr)
	}
}
