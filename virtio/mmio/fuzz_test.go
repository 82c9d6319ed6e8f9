package mmio

import (
	"encoding/binary"
	"sync/atomic"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/rng"
)

// checkedDevice wraps a device and fails the test if the transport breaks
// its side of virtio.Device: two calls at once, Activate on an active
// device, or a device left active after Close.
type checkedDevice struct {
	virtio.Device
	t      *testing.T
	busy   atomic.Bool
	active bool
	starts int
}

func (d *checkedDevice) enter(what string) func() {
	if !d.busy.CompareAndSwap(false, true) {
		d.t.Fatalf("transport called %s while another call was in progress", what)
	}
	return func() { d.busy.Store(false) }
}

func (d *checkedDevice) ReadConfig(off uint64, p []byte) {
	defer d.enter("ReadConfig")()
	d.Device.ReadConfig(off, p)
}

func (d *checkedDevice) WriteConfig(off uint64, p []byte) {
	defer d.enter("WriteConfig")()
	d.Device.WriteConfig(off, p)
}

func (d *checkedDevice) Activate(a *virtio.Activation) error {
	defer d.enter("Activate")()
	if d.active {
		d.t.Fatal("Activate on a device that is already active")
	}
	if len(a.Queues) != len(d.QueueMaxSizes()) || len(a.Kicks) != len(a.Queues) {
		d.t.Fatalf("activation with %d queues and %d kicks for a device of %d", len(a.Queues), len(a.Kicks), len(d.QueueMaxSizes()))
	}
	err := d.Device.Activate(a)
	if err == nil {
		d.active = true
		d.starts++
	}
	return err
}

func (d *checkedDevice) Reset() {
	defer d.enter("Reset")()
	d.Device.Reset()
	d.active = false
}

type countIrq struct{ n atomic.Int64 }

func (i *countIrq) Trigger() error { i.n.Add(1); return nil }

// fuzzMemSize is the guest memory of FuzzRegisterWrites; its first
// fuzzImage bytes come from the input, so queue tables and chains there
// are the fuzzer's too.
const (
	fuzzMemSize = 64 << 10
	fuzzImage   = 4 << 10
	fuzzOpLen   = 7
)

// FuzzRegisterWrites drives the transport in front of a real device
// (virtio-rng, whose goroutine serves the queue from hostile guest memory)
// with a sequence of register accesses: the input is a guest memory image
// (its first 4 KiB) followed by operations of 7 bytes each (kind, a 16-bit
// offset, a 32-bit value): 32-bit writes and reads anywhere in and past
// the window, accesses of odd sizes, and queue notifications. Whatever
// the order, the transport must not panic, must keep to the device
// contract (checkedDevice), must leave its state within bounds, and
// Close must leave the device stopped.
func FuzzRegisterWrites(f *testing.F) {
	for _, s := range registerSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runRegisterOps(t, data) })
}

// TestRegisterSeedsActivate: the first seed is a working driver, so the
// fuzzer starts from sequences that reach an active device.
func TestRegisterSeedsActivate(t *testing.T) {
	if dev := runRegisterOps(t, registerSeeds()[0]); dev.starts != 1 {
		t.Fatalf("the driver-like seed activated the device %d times, want 1", dev.starts)
	}
}

// runRegisterOps is FuzzRegisterWrites' body; it returns the device.
func runRegisterOps(t *testing.T, data []byte) *checkedDevice {
	mem := guestmem.New(fuzzMemSize)
	img := data[:min(len(data), fuzzImage)]
	mem.WriteAt(img, 0)
	ops := data[len(img):]
	dev := &checkedDevice{Device: rng.New(nil), t: t}
	m := NewMMIO(dev, mem, &countIrq{}, nil)
	var b [8]byte
	for len(ops) >= fuzzOpLen {
		kind, off, v := ops[0], uint64(binary.LittleEndian.Uint16(ops[1:])), binary.LittleEndian.Uint32(ops[3:])
		ops = ops[fuzzOpLen:]
		switch kind % 5 {
		case 0:
			binary.LittleEndian.PutUint32(b[:], v)
			m.Write(off%(MMIOSize+0x100), b[:4])
		case 1:
			m.Read(off%(MMIOSize+0x100), b[:4])
		case 2: // an odd size: 1, 2, 3, 5 or 8 bytes
			n := []int{1, 2, 3, 5, 8}[v%5]
			binary.LittleEndian.PutUint32(b[:], v)
			if v&(1<<31) != 0 {
				m.Read(off%(MMIOSize+0x100), b[:n])
			} else {
				m.Write(off%(MMIOSize+0x100), b[:n])
			}
		case 3:
			m.Notify(uint16(v))
		case 4: // the register sequence a driver uses most: status
			binary.LittleEndian.PutUint32(b[:], v&0xff)
			m.Write(RegStatus, b[:4])
		}
		m.mu.Lock()
		if len(m.queues) != len(m.maxSizes) {
			t.Fatalf("transport holds %d queues for a device of %d", len(m.queues), len(m.maxSizes))
		}
		if k := m.kicks.Load(); k != nil && len(*k) != len(m.maxSizes) {
			t.Fatalf("transport holds %d kick channels for a device of %d", len(*k), len(m.maxSizes))
		}
		if m.active != dev.active {
			t.Fatalf("transport says active=%v, device says %v", m.active, dev.active)
		}
		m.mu.Unlock()
		if s := m.intStatus.Load(); s&^(InterruptUsedBuffer|InterruptConfigChange) != 0 {
			t.Fatalf("interrupt status %#x has bits beyond the two defined", s)
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if dev.active {
		t.Fatal("the device is still active after Close")
	}
	// After Close nothing reaches the device any more.
	binary.LittleEndian.PutUint32(b[:], virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK)
	m.Write(RegStatus, b[:4])
	if dev.active {
		t.Fatal("a closed transport activated its device")
	}
	return dev
}

// registerSeeds are what a Linux driver does: reset, acknowledge,
// features, one queue set up in the memory image, DRIVER_OK, a buffer
// made available and notified; then variations (reset while running,
// queue setup after DRIVER_OK, a queue too large).
func registerSeeds() [][]byte {
	const desc, avail, used = 0x100, 0x200, 0x300
	img := make([]byte, fuzzImage)
	// One descriptor: 64 writable bytes at 0x800; the available ring
	// offers it.
	binary.LittleEndian.PutUint64(img[desc:], 0x800)
	binary.LittleEndian.PutUint32(img[desc+8:], 64)
	binary.LittleEndian.PutUint16(img[desc+12:], 2) // VIRTQ_DESC_F_WRITE
	binary.LittleEndian.PutUint16(img[avail+2:], 1) // idx
	type op struct {
		kind byte
		off  uint16
		v    uint32
	}
	enc := func(ops ...op) []byte {
		out := append([]byte(nil), img...)
		for _, o := range ops {
			var b [fuzzOpLen]byte
			b[0] = o.kind
			binary.LittleEndian.PutUint16(b[1:], o.off)
			binary.LittleEndian.PutUint32(b[3:], o.v)
			out = append(out, b[:]...)
		}
		return out
	}
	w := func(reg uint16, v uint32) op { return op{0, reg, v} }
	ack, drv, fok, dok := virtio.StatusAcknowledge, virtio.StatusDriver, virtio.StatusFeaturesOK, virtio.StatusDriverOK
	setup := []op{
		w(RegStatus, 0), w(RegStatus, ack), w(RegStatus, ack|drv),
		op{1, RegDeviceFeatures, 0},
		w(RegDriverFeaturesSel, 1), w(RegDriverFeatures, 1), // VERSION_1
		w(RegStatus, ack|drv|fok), op{1, RegStatus, 0},
		w(RegQueueSel, 0), op{1, RegQueueNumMax, 0}, w(RegQueueNum, 8),
		w(RegQueueDescLow, desc), w(RegQueueDriverLow, avail), w(RegQueueDeviceLow, used),
		w(RegQueueReady, 1),
	}
	run := append(append([]op(nil), setup...), w(RegStatus, ack|drv|fok|dok), w(RegQueueNotify, 0), op{1, RegInterruptStatus, 0}, w(RegInterruptACK, 1))
	return [][]byte{
		enc(run...),
		enc(append(append([]op(nil), run...), w(RegStatus, 0), w(RegStatus, ack))...),                                 // reset while running
		enc(append(append([]op(nil), run...), w(RegQueueNum, 4), w(RegQueueDescLow, 0xfff0), w(RegQueueReady, 0))...), // setup after DRIVER_OK
		enc(append(append([]op(nil), setup[:10]...), w(RegQueueNum, 1<<16), w(RegQueueReady, 1), w(RegStatus, ack|drv|fok|dok))...),
		enc(append(append([]op(nil), setup...), op{2, RegConfig, 3}, op{2, RegQueueSel, 1<<31 | 4}, w(RegQueueSel, 7), w(RegStatus, ack|drv|fok|dok))...),
	}
}
