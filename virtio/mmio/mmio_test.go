package mmio_test

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/mmio"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// fakeDevice records what the transport does to it.
type fakeDevice struct {
	mu          sync.Mutex
	config      [8]byte
	activations []*virtio.Activation
	resets      int
	closed      bool
	activateErr error
}

func (*fakeDevice) DeviceType() uint32      { return 42 }
func (*fakeDevice) Features() uint64        { return 1<<0 | 1<<40 }
func (*fakeDevice) QueueMaxSizes() []uint16 { return []uint16{64, 16} }
func (f *fakeDevice) ReadConfig(off uint64, p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off < 8 {
		copy(p, f.config[off:])
	}
}
func (f *fakeDevice) WriteConfig(off uint64, p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off < 8 {
		copy(f.config[off:], p)
	}
}
func (f *fakeDevice) Activate(a *virtio.Activation) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.activateErr != nil {
		return f.activateErr
	}
	f.activations = append(f.activations, a)
	return nil
}
func (f *fakeDevice) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets++
}
func (f *fakeDevice) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	return nil
}

func (f *fakeDevice) lastActivation() *virtio.Activation {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.activations) == 0 {
		return nil
	}
	return f.activations[len(f.activations)-1]
}

func TestIdentification(t *testing.T) {
	dev := &fakeDevice{}
	h := virtiotest.Start(t, dev, ^uint64(0), 64)
	for _, c := range []struct {
		reg  uint64
		want uint32
	}{{mmio.RegMagic, 0x74726976}, {mmio.RegVersion, 2}, {mmio.RegDeviceID, 42}, {mmio.RegVendorID, 0}} {
		if got := h.Read32(c.reg); got != c.want {
			t.Errorf("register %#x = %#x, want %#x", c.reg, got, c.want)
		}
	}
	want := uint64(1<<0|1<<40) | virtio.FeatureVersion1 | virtio.FeatureIndirectDesc | virtio.FeatureEventIdx
	if got := h.DeviceFeatures(); got != want {
		t.Errorf("device features %#x, want %#x", got, want)
	}
	h.Write32(mmio.RegDeviceFeaturesSel, 2)
	if got := h.Read32(mmio.RegDeviceFeatures); got != 0 {
		t.Errorf("feature word 2 = %#x, want 0", got)
	}
}

func TestQueueSetupAndActivation(t *testing.T) {
	dev := &fakeDevice{}
	h := virtiotest.Start(t, dev, ^uint64(0), 32)
	a := dev.lastActivation()
	if a == nil {
		t.Fatal("device not activated")
	}
	if len(a.Queues) != 2 || len(a.Kicks) != 2 {
		t.Fatalf("activation with %d queues, %d kicks", len(a.Queues), len(a.Kicks))
	}
	for i, q := range a.Queues {
		cfg, d := q.Config(), h.Queues[i]
		if cfg.Size != d.Size || cfg.DescAddr != d.Desc || cfg.DriverAddr != d.Avail || cfg.DeviceAddr != d.Used || !cfg.Indirect || !cfg.EventIdx {
			t.Errorf("queue %d config %+v, driver %+v", i, cfg, d)
		}
	}
	if h.Queues[0].Size != 32 || h.Queues[1].Size != 16 {
		t.Fatalf("sizes %d, %d: QueueNumMax not honoured", h.Queues[0].Size, h.Queues[1].Size)
	}
	if a.Features&(1<<40) == 0 || a.Features&virtio.FeatureVersion1 == 0 {
		t.Errorf("negotiated features %#x", a.Features)
	}
	// Queue 2 does not exist.
	h.Write32(mmio.RegQueueSel, 2)
	if got := h.Read32(mmio.RegQueueNumMax); got != 0 {
		t.Errorf("QueueNumMax of missing queue = %d", got)
	}
	// Queue registers are frozen while running.
	h.Write32(mmio.RegQueueSel, 0)
	h.Write32(mmio.RegQueueNum, 8)
	if got := h.Read32(mmio.RegQueueNum); got != 32 {
		t.Errorf("QueueNum changed to %d while running", got)
	}
	// Pending kicks from before DRIVER_OK plus a notify each.
	for i := range a.Kicks {
		select {
		case <-a.Kicks[i]:
		default:
			t.Errorf("queue %d: no initial kick", i)
		}
		h.Kick(i)
		select {
		case <-a.Kicks[i]:
		default:
			t.Errorf("queue %d: QueueNotify did not kick", i)
		}
	}
	// Notifications coalesce and never block; bad indices are ignored.
	for range 10 {
		h.MMIO.Notify(1)
		h.MMIO.Notify(7)
	}
}

func TestFeatureNegotiationRejects(t *testing.T) {
	for name, feat := range map[string]uint64{
		"not offered":    virtio.FeatureVersion1 | 1<<3,
		"legacy driver":  1 << 0,
		"no version bit": 0,
	} {
		t.Run(name, func(t *testing.T) {
			m := mmio.NewMMIO(&fakeDevice{}, guestmem.New(1<<20), virtiotest.NewIrq(), nil)
			w := func(off uint64, v uint32) { var b [4]byte; binary.LittleEndian.PutUint32(b[:], v); m.Write(off, b[:]) }
			r := func(off uint64) uint32 { var b [4]byte; m.Read(off, b[:]); return binary.LittleEndian.Uint32(b[:]) }
			w(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver)
			w(mmio.RegDriverFeaturesSel, 0)
			w(mmio.RegDriverFeatures, uint32(feat))
			w(mmio.RegDriverFeaturesSel, 1)
			w(mmio.RegDriverFeatures, uint32(feat>>32))
			w(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK)
			if r(mmio.RegStatus)&virtio.StatusFeaturesOK != 0 {
				t.Fatalf("FEATURES_OK accepted for %#x", feat)
			}
		})
	}
}

func TestBadQueueNeedsReset(t *testing.T) {
	dev := &fakeDevice{}
	mem := guestmem.New(1 << 20)
	irq := virtiotest.NewIrq()
	m := mmio.NewMMIO(dev, mem, irq, nil)
	w := func(off uint64, v uint32) { var b [4]byte; binary.LittleEndian.PutUint32(b[:], v); m.Write(off, b[:]) }
	r := func(off uint64) uint32 { var b [4]byte; m.Read(off, b[:]); return binary.LittleEndian.Uint32(b[:]) }
	st := virtio.StatusAcknowledge | virtio.StatusDriver | virtio.StatusFeaturesOK
	w(mmio.RegDriverFeaturesSel, 1)
	w(mmio.RegDriverFeatures, 1) // VERSION_1
	w(mmio.RegStatus, st)
	w(mmio.RegQueueSel, 0)
	w(mmio.RegQueueNum, 24) // not a power of two
	w(mmio.RegQueueDescLow, 0x1000)
	w(mmio.RegQueueDriverLow, 0x2000)
	w(mmio.RegQueueDeviceLow, 0x3000)
	w(mmio.RegQueueReady, 1)
	w(mmio.RegStatus, st|virtio.StatusDriverOK)
	if dev.lastActivation() != nil {
		t.Fatal("device activated with a bad queue")
	}
	if r(mmio.RegStatus)&virtio.StatusDeviceNeedsReset == 0 {
		t.Fatal("DEVICE_NEEDS_RESET not set")
	}
	if r(mmio.RegInterruptStatus)&mmio.InterruptConfigChange == 0 || irq.Count() != 1 {
		t.Fatalf("config interrupt: status %#x, triggers %d", r(mmio.RegInterruptStatus), irq.Count())
	}
	// Reset clears it all.
	w(mmio.RegStatus, 0)
	if s := r(mmio.RegStatus); s != 0 {
		t.Fatalf("status after reset %#x", s)
	}
	if s := r(mmio.RegInterruptStatus); s != 0 {
		t.Fatalf("interrupt status after reset %#x", s)
	}
}

func TestActivateErrorNeedsReset(t *testing.T) {
	dev := &fakeDevice{activateErr: errors.New("no")}
	mem := guestmem.New(1 << 20)
	m := mmio.NewMMIO(dev, mem, virtiotest.NewIrq(), nil)
	w := func(off uint64, v uint32) { var b [4]byte; binary.LittleEndian.PutUint32(b[:], v); m.Write(off, b[:]) }
	r := func(off uint64) uint32 { var b [4]byte; m.Read(off, b[:]); return binary.LittleEndian.Uint32(b[:]) }
	w(mmio.RegDriverFeaturesSel, 1)
	w(mmio.RegDriverFeatures, 1)
	w(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK)
	if r(mmio.RegStatus)&virtio.StatusDeviceNeedsReset == 0 {
		t.Fatal("failed activation did not set DEVICE_NEEDS_RESET")
	}
}

func TestResetAndInterruptAck(t *testing.T) {
	dev := &fakeDevice{}
	h := virtiotest.Start(t, dev, ^uint64(0), 16)
	a := dev.lastActivation()
	a.Irq.UsedBuffer()
	if got := h.Read32(mmio.RegInterruptStatus); got != mmio.InterruptUsedBuffer {
		t.Fatalf("interrupt status %#x", got)
	}
	if h.Irq.Count() != 1 {
		t.Fatalf("%d triggers", h.Irq.Count())
	}
	h.Write32(mmio.RegInterruptACK, mmio.InterruptUsedBuffer)
	if got := h.Read32(mmio.RegInterruptStatus); got != 0 {
		t.Fatalf("interrupt status after ACK %#x", got)
	}
	a.Irq.NeedsReset(errors.New("broken"))
	if !h.NeedsReset() || h.Read32(mmio.RegInterruptStatus) != mmio.InterruptConfigChange {
		t.Fatal("NeedsReset not reflected")
	}
	h.Write32(mmio.RegStatus, 0)
	dev.mu.Lock()
	resets := dev.resets
	dev.mu.Unlock()
	if resets != 1 {
		t.Fatalf("device reset %d times", resets)
	}
	if h.Read32(mmio.RegStatus) != 0 || h.Read32(mmio.RegQueueReady) != 0 || h.Read32(mmio.RegQueueNum) != 0 {
		t.Fatal("registers not cleared by reset")
	}
	// Notify after reset goes nowhere and does not block.
	h.MMIO.Notify(0)
	// The driver can bring the device up again.
	d := virtiotest.NewDriver(t, h.Heap, 16)
	h.Write32(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver)
	h.Write32(mmio.RegDriverFeaturesSel, 1)
	h.Write32(mmio.RegDriverFeatures, 1)
	h.Write32(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK)
	h.SetupQueue(0, d)
	h.Write32(mmio.RegStatus, virtio.StatusAcknowledge|virtio.StatusDriver|virtio.StatusFeaturesOK|virtio.StatusDriverOK)
	if b := dev.lastActivation(); b == a || b.Queues[0] == nil || b.Queues[1] != nil {
		t.Fatalf("reactivation: %+v", b)
	}
}

func TestConfigSpace(t *testing.T) {
	dev := &fakeDevice{config: [8]byte{1, 2, 3, 4, 5, 6, 7, 8}}
	h := virtiotest.Start(t, dev, ^uint64(0), 16)
	if got := h.Config(2, 2); got[0] != 3 || got[1] != 4 {
		t.Fatalf("config read %v", got)
	}
	if got := h.Config(0, 8); got[7] != 8 {
		t.Fatalf("8-byte config read %v", got)
	}
	if got := h.Config(0, 3); got[0] != 0 {
		t.Fatalf("3-byte config read not zero: %v", got)
	}
	h.MMIO.Write(mmio.RegConfig+1, []byte{0xaa})
	if got := h.Config(1, 1); got[0] != 0xaa {
		t.Fatalf("config write not forwarded: %v", got)
	}
}

func TestOddAccessesNeverPanic(t *testing.T) {
	h := virtiotest.Start(t, &fakeDevice{}, ^uint64(0), 16)
	for _, size := range []int{0, 1, 2, 3, 4, 5, 8, 16} {
		for off := uint64(0); off < mmio.MMIOSize+16; off++ {
			b := make([]byte, size)
			for i := range b {
				b[i] = 0xff
			}
			if off < mmio.RegConfig && (size != 4 || off%4 != 0) {
				h.MMIO.Read(off, b)
				for _, x := range b {
					if x != 0 {
						t.Fatalf("bad-size read at %#x size %d gave %v", off, size, b)
					}
				}
			}
			if off != mmio.RegStatus && off != mmio.RegQueueNotify {
				h.MMIO.Write(off, b)
			}
		}
	}
	h.MMIO.Read(^uint64(0), make([]byte, 4))
}

func TestCloseClosesDevice(t *testing.T) {
	dev := &fakeDevice{}
	m := mmio.NewMMIO(dev, guestmem.New(1<<20), virtiotest.NewIrq(), nil)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if !dev.closed {
		t.Fatal("device not closed")
	}
}

func TestConcurrentInterruptsAndRegisters(t *testing.T) {
	dev := &fakeDevice{}
	h := virtiotest.Start(t, dev, ^uint64(0), 16)
	a := dev.lastActivation()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				a.Irq.UsedBuffer()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				h.MMIO.Notify(0)
			}
		}
	}()
	deadline := time.Now().Add(100 * time.Millisecond)
	for time.Now().Before(deadline) {
		if s := h.Read32(mmio.RegInterruptStatus); s != 0 {
			h.Write32(mmio.RegInterruptACK, s)
		}
		h.Read32(mmio.RegStatus)
	}
	close(stop)
	wg.Wait()
}

func TestCmdlineArg(t *testing.T) {
	if got, want := mmio.CmdlineArg(0xd0000000, 5), "virtio_mmio.device=4K@0xd0000000:5"; got != want {
		t.Fatalf("CmdlineArg = %q, want %q", got, want)
	}
}
