package mmio_test

import (
	"encoding/binary"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/mmio"
	"github.com/cellvm/cellvm/virtio/queue"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// pausable is a fakeDevice that can be paused, counting the calls.
type pausable struct {
	fakeDevice
	pauses, resumes int
}

func (p *pausable) Pause()  { p.mu.Lock(); p.pauses++; p.mu.Unlock() }
func (p *pausable) Resume() { p.mu.Lock(); p.resumes++; p.mu.Unlock() }

func drainKicks(a *virtio.Activation) {
	for _, k := range a.Kicks {
		select {
		case <-k:
		default:
		}
	}
}

func TestTransportStateRoundTrip(t *testing.T) {
	dev := &pausable{}
	h := virtiotest.Start(t, dev, ^uint64(0), 32)
	h.Write32(mmio.RegQueueSel, 1)
	h.Write32(mmio.RegDeviceFeaturesSel, 1)
	h.Queues[0].Post(virtiotest.W(8)) // posted, not yet seen by the device
	// The device signals a used buffer the driver has not acknowledged.
	dev.lastActivation().Irq.UsedBuffer()

	if _, err := h.MMIO.Save(); err == nil {
		t.Fatal("Save of a running device succeeded")
	}
	st, mem := h.Snapshot()
	if dev.pauses != 1 || !st.Active || len(st.Live) != 2 || st.Live[0] == nil || st.IntStatus != mmio.InterruptUsedBuffer {
		t.Fatalf("saved %+v (pauses %d)", st, dev.pauses)
	}

	dev2 := &pausable{}
	r := h.Restore(dev2, st, mem)
	a := dev2.lastActivation()
	if a == nil || len(a.Queues) != 2 || a.Features != h.Features {
		t.Fatalf("restored device activation %+v", a)
	}
	for i, q := range a.Queues {
		if got := q.Save(); got != *st.Live[i] {
			t.Errorf("queue %d restored at %+v, saved %+v", i, got, *st.Live[i])
		}
	}
	// The chain posted before the save is there for the restored device.
	if c, err := a.Queues[0].Pop(a.Mem); err != nil || c == nil {
		t.Fatalf("restored queue Pop = %+v, %v", c, err)
	}
	// The registers read as the driver left them, and the pending
	// interrupt is raised again.
	for _, c := range []struct {
		reg  uint64
		want uint32
	}{
		{mmio.RegStatus, h.Read32(mmio.RegStatus)},
		{mmio.RegInterruptStatus, mmio.InterruptUsedBuffer},
		{mmio.RegQueueNum, uint32(h.Queues[1].Size)}, // QueueSel 1 was restored
		{mmio.RegQueueReady, 1},
		{mmio.RegConfigGeneration, st.ConfigGen + 1},
	} {
		if got := r.Read32(c.reg); got != c.want {
			t.Errorf("restored register %#x = %#x, want %#x", c.reg, got, c.want)
		}
	}
	if r.Irq.Count() != 1 {
		t.Errorf("restore raised %d interrupts, want 1", r.Irq.Count())
	}
	// Saved again (paused), the restored transport gives the same state
	// but for the configuration generation.
	if err := r.MMIO.Pause(); err != nil {
		t.Fatal(err)
	}
	again, err := r.MMIO.Save()
	if err != nil {
		t.Fatal(err)
	}
	st.ConfigGen++
	st.Live[0].LastAvail++ // the Pop above
	if !reflect.DeepEqual(again, st) {
		t.Errorf("state after a round trip:\n%+v\nwant\n%+v", again, st)
	}
}

func TestPauseResume(t *testing.T) {
	dev := &pausable{}
	h := virtiotest.Start(t, dev, ^uint64(0), 32)
	a := dev.lastActivation()
	drainKicks(a)
	for range 2 {
		if err := h.MMIO.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	h.MMIO.Resume()
	h.MMIO.Resume()
	if dev.pauses != 1 || dev.resumes != 1 {
		t.Fatalf("pauses %d, resumes %d: want one each", dev.pauses, dev.resumes)
	}
	for i, k := range a.Kicks {
		select {
		case <-k:
		default:
			t.Errorf("queue %d not kicked on resume", i)
		}
	}

	plain := &fakeDevice{}
	hp := virtiotest.Start(t, plain, ^uint64(0), 32)
	if err := hp.MMIO.Pause(); !errors.Is(err, mmio.ErrNotPausable) {
		t.Errorf("pause of a device without Pause: %v, want ErrNotPausable", err)
	}
}

func TestRestoreRefusesMismatch(t *testing.T) {
	dev := &pausable{}
	h := virtiotest.Start(t, dev, ^uint64(0), 32)
	st, mem := h.Snapshot()
	fresh := func() *mmio.MMIO { return mmio.NewMMIO(&pausable{}, mem, virtiotest.NewIrq(), nil) }
	for _, c := range []struct {
		name   string
		change func(*mmio.State)
	}{
		{"another device type", func(s *mmio.State) { s.DeviceType = 2 }},
		{"another queue count", func(s *mmio.State) { s.Queues = s.Queues[:1] }},
		{"features not offered", func(s *mmio.State) { s.DrvFeatures |= 1 << 50 }},
		{"bad interrupt status", func(s *mmio.State) { s.IntStatus = 8 }},
		{"ready queue without a position", func(s *mmio.State) { s.Live = []*queue.State{nil, s.Live[1]} }},
		{"position for another layout", func(s *mmio.State) { q := *s.Live[0]; q.Config.DescAddr += 16; s.Live = []*queue.State{&q, s.Live[1]} }},
		{"ring features not negotiated", func(s *mmio.State) { s.DrvFeatures &^= virtio.FeatureEventIdx }},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := st
			bad.Queues = append([]mmio.QueueRegs(nil), st.Queues...)
			bad.Live = append([]*queue.State(nil), st.Live...)
			c.change(&bad)
			m := fresh()
			defer m.Close()
			if err := m.Restore(bad); err == nil {
				t.Fatal("restore succeeded")
			}
			// Refused, the transport is untouched and can still be restored.
			if err := m.Restore(st); err != nil {
				t.Fatalf("restore after a refused one: %v", err)
			}
		})
	}
	m := fresh()
	defer m.Close()
	if err := m.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(st); err == nil {
		t.Error("a second restore into a transport in use succeeded")
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if err := m.Restore(st); err == nil {
		t.Error("a restore into a started transport succeeded")
	}
}

// TestStartRefusesQueuesOutOfMemory: what only guest memory can say about
// a saved queue (it lies outside memory; the used index there is not the
// saved one) is Start's to check, since Restore reads no memory. The
// device stays inactive.
func TestStartRefusesQueuesOutOfMemory(t *testing.T) {
	h := virtiotest.Start(t, &pausable{}, ^uint64(0), 32)
	st, mem := h.Snapshot()
	for _, c := range []struct {
		name   string
		change func(*mmio.State)
	}{
		{"queue outside memory", func(s *mmio.State) {
			q := *s.Live[0]
			q.Config.DeviceAddr = virtiotest.MemSize
			s.Queues = append([]mmio.QueueRegs{{Num: q.Config.Size, Ready: true, Desc: q.Config.DescAddr, Driver: q.Config.DriverAddr, Device: q.Config.DeviceAddr}}, s.Queues[1:]...)
			s.Live = []*queue.State{&q, s.Live[1]}
		}},
		{"used index not the saved one", func(s *mmio.State) { q := *s.Live[0]; q.UsedIdx += 3; s.Live = []*queue.State{&q, s.Live[1]} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			bad := st
			bad.Queues = append([]mmio.QueueRegs(nil), st.Queues...)
			bad.Live = append([]*queue.State(nil), st.Live...)
			c.change(&bad)
			dev := &pausable{}
			m := mmio.NewMMIO(dev, mem, virtiotest.NewIrq(), nil)
			defer m.Close()
			if err := m.Restore(bad); err != nil {
				t.Fatalf("restore (registers only): %v", err)
			}
			if err := m.Start(); err == nil {
				t.Fatal("start succeeded")
			}
			if dev.lastActivation() != nil {
				t.Fatal("the device was activated on a bad queue")
			}
		})
	}
}

// touchCounter is guest memory that counts every access.
type touchCounter struct {
	guestmem.Memory
	mu      sync.Mutex
	touches int
}

func (c *touchCounter) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.touches }
func (c *touchCounter) touch()     { c.mu.Lock(); c.touches++; c.mu.Unlock() }
func (c *touchCounter) ReadAt(p []byte, addr uint64) error {
	c.touch()
	return c.Memory.ReadAt(p, addr)
}
func (c *touchCounter) WriteAt(p []byte, addr uint64) error {
	c.touch()
	return c.Memory.WriteAt(p, addr)
}
func (c *touchCounter) Slice(addr, n uint64) ([]byte, error) {
	c.touch()
	return c.Memory.Slice(addr, n)
}

// TestRestoreTouchesNoMemoryUntilStart is the order a jailed VMM relies
// on: Restore puts the registers back without one access to guest memory
// and without activating the device, and raises no interrupt; only Start
// (after the jail) reads the rings, hands the device its queues and
// raises the pending interrupt.
func TestRestoreTouchesNoMemoryUntilStart(t *testing.T) {
	h := virtiotest.Start(t, &pausable{}, ^uint64(0), 32)
	h.Queues[0].Post(virtiotest.W(8))
	st, mem := h.Snapshot()
	st.IntStatus = mmio.InterruptUsedBuffer
	counted := &touchCounter{Memory: mem}
	dev := &pausable{}
	irq := virtiotest.NewIrq()
	m := mmio.NewMMIO(dev, counted, irq, nil)
	defer m.Close()
	if err := m.Restore(st); err != nil {
		t.Fatal(err)
	}
	if n := counted.count(); n != 0 {
		t.Fatalf("Restore made %d accesses to guest memory, want none before Start", n)
	}
	if dev.lastActivation() != nil || irq.Count() != 0 {
		t.Fatalf("Restore activated the device (%v) or raised %d interrupts: that is Start's", dev.lastActivation() != nil, irq.Count())
	}
	if _, err := m.Save(); err == nil {
		t.Error("Save of a restored transport before Start succeeded")
	}
	if err := m.Start(); err != nil {
		t.Fatal(err)
	}
	if counted.count() == 0 || dev.lastActivation() == nil || irq.Count() != 1 {
		t.Fatalf("after Start: %d accesses, activated %v, %d interrupts; want accesses, activation, one interrupt",
			counted.count(), dev.lastActivation() != nil, irq.Count())
	}
	if err := m.Start(); err != nil || irq.Count() != 1 {
		t.Fatalf("a second Start: %v, %d interrupts; want nothing done", err, irq.Count())
	}
}

// TestQueueGate: the gate runs before a device gets its queues, on a
// driver's DRIVER_OK and on a restored transport's Start; a gate that
// fails keeps the device inactive (needs reset on the boot path, an error
// from Start on the restore path) and no guest memory is read.
func TestQueueGate(t *testing.T) {
	refused := errors.New("not jailed")
	t.Run("restore", func(t *testing.T) {
		h := virtiotest.Start(t, &pausable{}, ^uint64(0), 32)
		st, mem := h.Snapshot()
		counted := &touchCounter{Memory: mem}
		dev := &pausable{}
		m := mmio.NewMMIO(dev, counted, virtiotest.NewIrq(), nil)
		defer m.Close()
		calls := 0
		m.SetQueueGate(func() error { calls++; return refused })
		if err := m.Restore(st); err != nil {
			t.Fatal(err)
		}
		if err := m.Start(); !errors.Is(err, refused) {
			t.Fatalf("Start with a refusing gate: %v, want the gate's error", err)
		}
		if calls != 1 || dev.lastActivation() != nil || counted.count() != 0 {
			t.Fatalf("gate calls %d, activated %v, %d memory accesses; want 1, false, 0", calls, dev.lastActivation() != nil, counted.count())
		}
	})
	t.Run("boot", func(t *testing.T) {
		dev := &fakeDevice{}
		counted := &touchCounter{Memory: guestmem.New(virtiotest.MemSize)}
		m := mmio.NewMMIO(dev, counted, virtiotest.NewIrq(), nil)
		defer m.Close()
		calls := 0
		m.SetQueueGate(func() error { calls++; return refused })
		w := func(off uint64, v uint32) {
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], v)
			m.Write(off, b[:])
		}
		st := virtio.StatusAcknowledge | virtio.StatusDriver
		w(mmio.RegStatus, st)
		w(mmio.RegDriverFeaturesSel, 1)
		w(mmio.RegDriverFeatures, 1) // VERSION_1
		st |= virtio.StatusFeaturesOK
		w(mmio.RegStatus, st)
		w(mmio.RegQueueSel, 0)
		w(mmio.RegQueueNum, 16)
		w(mmio.RegQueueDescLow, 0x10000)
		w(mmio.RegQueueDriverLow, 0x20000)
		w(mmio.RegQueueDeviceLow, 0x30000)
		w(mmio.RegQueueReady, 1)
		w(mmio.RegStatus, st|virtio.StatusDriverOK)
		if calls != 1 {
			t.Fatalf("gate ran %d times at DRIVER_OK, want 1", calls)
		}
		var b [4]byte
		m.Read(mmio.RegStatus, b[:])
		if binary.LittleEndian.Uint32(b[:])&virtio.StatusDeviceNeedsReset == 0 {
			t.Fatal("a refused gate did not mark the device as needing a reset")
		}
		if dev.lastActivation() != nil || counted.count() != 0 {
			t.Fatalf("activated %v, %d memory accesses; want neither", dev.lastActivation() != nil, counted.count())
		}
	})
}

// TestRestoreInactive restores a device the driver had not started: it
// stays inactive, and the driver can still bring it up.
func TestRestoreInactive(t *testing.T) {
	mem := guestmem.New(virtiotest.MemSize)
	m := mmio.NewMMIO(&pausable{}, mem, virtiotest.NewIrq(), nil)
	st, err := m.Save()
	if err != nil || st.Active {
		t.Fatalf("save of a fresh transport: %+v, %v", st, err)
	}
	dev := &pausable{}
	m2 := mmio.NewMMIO(dev, mem, virtiotest.NewIrq(), nil)
	defer m2.Close()
	if err := m2.Restore(st); err != nil {
		t.Fatal(err)
	}
	if dev.lastActivation() != nil {
		t.Fatal("an inactive device was activated by its restore")
	}
}
