package virtiotest

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/mmio"
)

// Irq is an mmio.Interrupt that counts triggers and wakes waiters.
type Irq struct {
	n    atomic.Int64
	wake chan struct{}
}

// NewIrq returns an interrupt line for tests.
func NewIrq() *Irq { return &Irq{wake: make(chan struct{}, 1)} }

// Trigger implements mmio.Interrupt.
func (i *Irq) Trigger() error {
	i.n.Add(1)
	select {
	case i.wake <- struct{}{}:
	default:
	}
	return nil
}

// Count is the number of triggers so far.
func (i *Irq) Count() int64 { return i.n.Load() }

// Harness is a device behind a virtio-mmio transport, set up the way Linux's
// virtio_mmio driver does it, with one Driver per queue.
type Harness struct {
	tb     testing.TB
	Mem    *guestmem.Regions
	Heap   *Heap
	MMIO   *mmio.MMIO
	Irq    *Irq
	Queues []*Driver
	// Features are the negotiated features.
	Features uint64
}

// MemSize is the guest memory a Harness gets.
const MemSize = 32 << 20

// Start puts dev behind a transport and initialises it, accepting the
// offered features that are in accept, with queues of at most queueSize
// entries. The transport is closed when the test ends.
func Start(tb testing.TB, dev virtio.Device, accept uint64, queueSize uint16) *Harness {
	tb.Helper()
	mem := guestmem.New(MemSize)
	h := &Harness{tb: tb, Mem: mem, Heap: NewHeap(tb, mem, 0x10000, MemSize), Irq: NewIrq()}
	h.MMIO = mmio.NewMMIO(dev, mem, h.Irq, nil)
	tb.Cleanup(func() {
		if err := h.MMIO.Close(); err != nil {
			tb.Errorf("close transport: %v", err)
		}
	})
	if h.Read32(mmio.RegMagic) != mmio.Magic || h.Read32(mmio.RegVersion) != mmio.Version {
		tb.Fatalf("bad magic/version")
	}
	h.Write32(mmio.RegStatus, 0)
	h.Write32(mmio.RegStatus, virtio.StatusAcknowledge)
	h.Write32(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver)
	h.Features = h.DeviceFeatures() & accept
	h.Write32(mmio.RegDriverFeaturesSel, 0)
	h.Write32(mmio.RegDriverFeatures, uint32(h.Features))
	h.Write32(mmio.RegDriverFeaturesSel, 1)
	h.Write32(mmio.RegDriverFeatures, uint32(h.Features>>32))
	st := virtio.StatusAcknowledge | virtio.StatusDriver | virtio.StatusFeaturesOK
	h.Write32(mmio.RegStatus, st)
	if h.Read32(mmio.RegStatus)&virtio.StatusFeaturesOK == 0 {
		tb.Fatalf("device refused features %#x", h.Features)
	}
	for i := 0; i < len(dev.QueueMaxSizes()); i++ {
		h.Write32(mmio.RegQueueSel, uint32(i))
		size := min(uint16(h.Read32(mmio.RegQueueNumMax)), queueSize)
		d := NewDriver(tb, h.Heap, size)
		h.SetupQueue(i, d)
		h.Queues = append(h.Queues, d)
	}
	h.Write32(mmio.RegStatus, st|virtio.StatusDriverOK)
	if s := h.Read32(mmio.RegStatus); s&virtio.StatusDeviceNeedsReset != 0 || s&virtio.StatusDriverOK == 0 {
		tb.Fatalf("device did not start: status %#x", s)
	}
	return h
}

// DeviceFeatures reads the 64 offered feature bits.
func (h *Harness) DeviceFeatures() uint64 {
	h.Write32(mmio.RegDeviceFeaturesSel, 0)
	lo := h.Read32(mmio.RegDeviceFeatures)
	h.Write32(mmio.RegDeviceFeaturesSel, 1)
	return uint64(h.Read32(mmio.RegDeviceFeatures))<<32 | uint64(lo)
}

// SetupQueue programs queue i with d's layout and marks it ready.
func (h *Harness) SetupQueue(i int, d *Driver) {
	h.Write32(mmio.RegQueueSel, uint32(i))
	h.Write32(mmio.RegQueueNum, uint32(d.Size))
	for _, r := range []struct {
		reg  uint64
		addr uint64
	}{{mmio.RegQueueDescLow, d.Desc}, {mmio.RegQueueDriverLow, d.Avail}, {mmio.RegQueueDeviceLow, d.Used}} {
		h.Write32(r.reg, uint32(r.addr))
		h.Write32(r.reg+4, uint32(r.addr>>32))
	}
	h.Write32(mmio.RegQueueReady, 1)
}

// Read32 is a 32-bit guest read of the window.
func (h *Harness) Read32(off uint64) uint32 {
	var b [4]byte
	h.MMIO.Read(off, b[:])
	return binary.LittleEndian.Uint32(b[:])
}

// Write32 is a 32-bit guest write to the window.
func (h *Harness) Write32(off uint64, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	h.MMIO.Write(off, b[:])
}

// Config reads n bytes of device config space.
func (h *Harness) Config(off uint64, n int) []byte {
	b := make([]byte, n)
	h.MMIO.Read(mmio.RegConfig+off, b)
	return b
}

// Kick notifies queue q the way the driver does (QueueNotify).
func (h *Harness) Kick(q int) { h.Write32(mmio.RegQueueNotify, uint32(q)) }

// Post posts a chain on queue q and kicks it.
func (h *Harness) Post(q int, segs ...Seg) uint16 {
	head := h.Queues[q].Post(segs...)
	h.Kick(q)
	return head
}

// Wait returns the next used entry of queue q, failing the test if none
// arrives within timeout.
func (h *Harness) Wait(q int, timeout time.Duration) Used {
	h.tb.Helper()
	u, ok := h.TryWait(q, timeout)
	if !ok {
		h.tb.Fatalf("queue %d: no used entry within %v (status %#x)", q, timeout, h.Read32(mmio.RegStatus))
	}
	return u
}

// TryWait is Wait without failing: ok is false on timeout.
func (h *Harness) TryWait(q int, timeout time.Duration) (Used, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if u, ok := h.Queues[q].Next(); ok {
			return u, true
		}
		select {
		case <-h.Irq.wake:
		case <-tick.C:
		case <-deadline.C:
			return Used{}, false
		}
	}
}

// NeedsReset says whether the device set DEVICE_NEEDS_RESET.
func (h *Harness) NeedsReset() bool {
	return h.Read32(mmio.RegStatus)&virtio.StatusDeviceNeedsReset != 0
}

// WaitIrq blocks until the device raises an interrupt (or one was raised
// since the last WaitIrq), or timeout passes; it reports which.
func (h *Harness) WaitIrq(timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-h.Irq.wake:
		return true
	case <-t.C:
		return false
	}
}
