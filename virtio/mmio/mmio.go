// Package mmio is the virtio-mmio transport, version 2 (virtio 1.x, 4.2): the
// register window a Linux guest finds through virtio_mmio.device= on its
// command line. It keeps the register model (features, status, queue setup,
// interrupt status) and hands a Device its queues when the driver sets
// DRIVER_OK.
//
// vCPU threads call Read and Write; device goroutines raise interrupts and
// report broken queues concurrently. Register state sits behind one mutex;
// what device goroutines touch (interrupt status, the needs-reset flag, the
// queue kick channels) is atomic, so a device never waits on a vCPU and Reset
// can wait for a device's goroutines while holding the register lock.
package mmio

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// MMIOSize is the size of a device's register window.
const MMIOSize = 0x1000

// Register offsets (virtio 1.x, 4.2.2).
const (
	RegMagic             = 0x000
	RegVersion           = 0x004
	RegDeviceID          = 0x008
	RegVendorID          = 0x00c
	RegDeviceFeatures    = 0x010
	RegDeviceFeaturesSel = 0x014
	RegDriverFeatures    = 0x020
	RegDriverFeaturesSel = 0x024
	RegQueueSel          = 0x030
	RegQueueNumMax       = 0x034
	RegQueueNum          = 0x038
	RegQueueReady        = 0x044
	RegQueueNotify       = 0x050
	RegInterruptStatus   = 0x060
	RegInterruptACK      = 0x064
	RegStatus            = 0x070
	RegQueueDescLow      = 0x080
	RegQueueDescHigh     = 0x084
	RegQueueDriverLow    = 0x090
	RegQueueDriverHigh   = 0x094
	RegQueueDeviceLow    = 0x0a0
	RegQueueDeviceHigh   = 0x0a4
	RegSHMLenLow         = 0x0b0
	RegSHMLenHigh        = 0x0b4
	RegConfigGeneration  = 0x0fc
	RegConfig            = 0x100
)

// Magic is "virt" read as a little-endian word; Version is the non-legacy
// (virtio 1.x) register layout.
const (
	Magic    = 0x74726976
	Version  = 2
	VendorID = 0
)

// Interrupt status bits.
const (
	InterruptUsedBuffer   = 1
	InterruptConfigChange = 2
)

// Ring features the transport offers on every device: the queue package
// implements them.
const transportFeatures = virtio.FeatureVersion1 | virtio.FeatureIndirectDesc | virtio.FeatureEventIdx

// Device is the device behind the transport.
type Device = virtio.Device

// Interrupt is the device's interrupt line. Trigger raises it as an edge
// (an irqfd write or a KVM_IRQ_LINE pulse in the VMM).
type Interrupt interface {
	Trigger() error
}

type queueRegs struct {
	num                  uint16
	ready                bool
	desc, driver, device uint64
}

// MMIO is one virtio-mmio register window in front of one device.
type MMIO struct {
	dev      Device
	mem      guestmem.Memory
	irq      Interrupt
	log      *slog.Logger
	maxSizes []uint16

	mu          sync.Mutex
	status      uint32
	devFeatSel  uint32
	drvFeatSel  uint32
	drvFeatures uint64
	queueSel    uint32
	queues      []queueRegs
	active      bool
	closed      bool
	live        []*queue.Queue // the device's queues while active
	paused      bool           // active, with the device paused (Pause)
	configGen   uint32
	// restored is what Start starts, from Restore until Start.
	restored *restoredQueues
	// gate runs before the device is handed its queues (SetQueueGate).
	gate func() error

	intStatus  atomic.Uint32
	needsReset atomic.Bool
	kicks      atomic.Pointer[[]chan struct{}]
}

// NewMMIO puts dev behind a virtio-mmio window over guest memory mem,
// raising irq for its interrupts.
func NewMMIO(dev Device, mem guestmem.Memory, irq Interrupt, log *slog.Logger) *MMIO {
	sizes := append([]uint16(nil), dev.QueueMaxSizes()...)
	return &MMIO{
		dev:      dev,
		mem:      mem,
		irq:      irq,
		log:      ratelog.Wrap(log).With("virtio_device", dev.DeviceType()),
		maxSizes: sizes,
		queues:   make([]queueRegs, len(sizes)),
	}
}

// CmdlineArg is the kernel command-line argument that tells Linux's
// virtio_mmio driver about a device window at base using interrupt irq.
func CmdlineArg(base uint64, irq uint32) string {
	return fmt.Sprintf("virtio_mmio.device=4K@%#x:%d", base, irq)
}

func (m *MMIO) offered() uint64 { return m.dev.Features() | transportFeatures }

// Read handles a guest read of len(data) bytes at offset in the window.
// Registers take 4-byte aligned 32-bit reads; the config space takes 1, 2,
// 4 and 8-byte reads. Anything else reads as zero.
func (m *MMIO) Read(offset uint64, data []byte) {
	clear(data)
	m.mu.Lock()
	defer m.mu.Unlock()
	if offset >= RegConfig {
		if offset < MMIOSize && validConfigSize(len(data)) {
			m.dev.ReadConfig(offset-RegConfig, data)
		}
		return
	}
	if len(data) != 4 || offset%4 != 0 {
		m.log.Debug("virtio-mmio: bad register read", "offset", offset, "size", len(data))
		return
	}
	binary.LittleEndian.PutUint32(data, m.readReg(offset))
}

func validConfigSize(n int) bool { return n == 1 || n == 2 || n == 4 || n == 8 }

func (m *MMIO) readReg(offset uint64) uint32 {
	q := m.selectedQueue()
	switch offset {
	case RegMagic:
		return Magic
	case RegVersion:
		return Version
	case RegDeviceID:
		return m.dev.DeviceType()
	case RegVendorID:
		return VendorID
	case RegDeviceFeatures:
		if m.devFeatSel < 2 {
			return uint32(m.offered() >> (32 * m.devFeatSel))
		}
	case RegQueueNumMax:
		if q != nil {
			return uint32(m.maxSizes[m.queueSel])
		}
	case RegQueueNum:
		if q != nil {
			return uint32(q.num)
		}
	case RegQueueReady:
		if q != nil && q.ready {
			return 1
		}
	case RegInterruptStatus:
		return m.intStatus.Load()
	case RegStatus:
		s := m.status
		if m.needsReset.Load() {
			s |= virtio.StatusDeviceNeedsReset
		}
		return s
	case RegQueueDescLow, RegQueueDescHigh, RegQueueDriverLow, RegQueueDriverHigh, RegQueueDeviceLow, RegQueueDeviceHigh:
		if q != nil {
			return uint32(*q.addrField(offset) >> (32 * (offset / 4 % 2)))
		}
	case RegSHMLenLow, RegSHMLenHigh:
		return ^uint32(0) // no shared memory regions
	case RegConfigGeneration:
		return m.configGen // changes only when a restore may have changed the config
	}
	return 0
}

func (m *MMIO) selectedQueue() *queueRegs {
	if int64(m.queueSel) < int64(len(m.queues)) {
		return &m.queues[m.queueSel]
	}
	return nil
}

func (q *queueRegs) addrField(offset uint64) *uint64 {
	switch offset &^ 4 {
	case RegQueueDescLow:
		return &q.desc
	case RegQueueDriverLow:
		return &q.driver
	default:
		return &q.device
	}
}

// Write handles a guest write of data at offset in the window.
func (m *MMIO) Write(offset uint64, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if offset >= RegConfig {
		if offset < MMIOSize && validConfigSize(len(data)) {
			m.dev.WriteConfig(offset-RegConfig, data)
		}
		return
	}
	if len(data) != 4 || offset%4 != 0 {
		m.log.Debug("virtio-mmio: bad register write", "offset", offset, "size", len(data))
		return
	}
	m.writeReg(offset, binary.LittleEndian.Uint32(data))
}

func (m *MMIO) writeReg(offset uint64, v uint32) {
	q := m.selectedQueue()
	// Queue setup is frozen once the queue is ready or the driver is
	// running (virtio 1.x, 4.2.2.3).
	queueWritable := q != nil && !q.ready && m.status&virtio.StatusDriverOK == 0
	switch offset {
	case RegDeviceFeaturesSel:
		m.devFeatSel = v
	case RegDriverFeatures:
		if m.drvFeatSel < 2 && m.status&virtio.StatusFeaturesOK == 0 {
			shift := 32 * m.drvFeatSel
			m.drvFeatures = m.drvFeatures&^(uint64(0xffffffff)<<shift) | uint64(v)<<shift
		}
	case RegDriverFeaturesSel:
		m.drvFeatSel = v
	case RegQueueSel:
		m.queueSel = v
	case RegQueueNum:
		if queueWritable {
			q.num = uint16(v)
			if v > 0xffff {
				q.num = 0 // fails validation at DRIVER_OK
			}
		}
	case RegQueueReady:
		if q != nil && m.status&virtio.StatusDriverOK == 0 {
			q.ready = v == 1
		}
	case RegQueueNotify:
		m.Notify(uint16(v))
	case RegInterruptACK:
		m.intStatus.And(^v)
	case RegStatus:
		m.writeStatus(v)
	case RegQueueDescLow, RegQueueDescHigh, RegQueueDriverLow, RegQueueDriverHigh, RegQueueDeviceLow, RegQueueDeviceHigh:
		if queueWritable {
			f := q.addrField(offset)
			shift := 32 * (offset / 4 % 2)
			*f = *f&^(uint64(0xffffffff)<<shift) | uint64(v)<<shift
		}
	default:
		m.log.Debug("virtio-mmio: write to read-only or unknown register", "offset", offset)
	}
}

func (m *MMIO) writeStatus(v uint32) {
	if v == 0 {
		m.reset()
		return
	}
	old := m.status
	v &^= virtio.StatusDeviceNeedsReset // device-owned
	if v&virtio.StatusFeaturesOK != 0 && old&virtio.StatusFeaturesOK == 0 && !m.featuresAcceptable() {
		m.log.Warn("virtio-mmio: driver features rejected", "driver", m.drvFeatures, "offered", m.offered())
		v &^= virtio.StatusFeaturesOK
	}
	if v&virtio.StatusDriverOK != 0 && v&virtio.StatusFeaturesOK == 0 {
		v &^= virtio.StatusDriverOK
	}
	m.status = v
	if v&virtio.StatusDriverOK != 0 && old&virtio.StatusDriverOK == 0 && !m.active && !m.closed {
		m.activate()
	}
}

func (m *MMIO) featuresAcceptable() bool {
	return m.drvFeatures&^m.offered() == 0 && m.drvFeatures&virtio.FeatureVersion1 != 0
}

func (m *MMIO) activate() {
	if err := m.passGate(); err != nil {
		m.fail(err)
		return
	}
	qs := make([]*queue.Queue, len(m.queues))
	for i, r := range m.queues {
		if !r.ready {
			continue
		}
		cfg := queue.Config{
			Size:       r.num,
			DescAddr:   r.desc,
			DriverAddr: r.driver,
			DeviceAddr: r.device,
			Indirect:   m.drvFeatures&virtio.FeatureIndirectDesc != 0,
			EventIdx:   m.drvFeatures&virtio.FeatureEventIdx != 0,
		}
		q, err := queue.New(m.mem, cfg, m.maxSizes[i])
		if err != nil {
			m.fail(fmt.Errorf("queue %d: %w", i, err))
			return
		}
		qs[i] = q
	}
	m.start(qs)
}

// SetQueueGate sets a check that runs each time the device is about to be
// handed its queues, before anything of them is read: when the driver sets
// DRIVER_OK, and in Start of a restored transport. An error keeps the
// device from starting (it needs a reset, or Start fails). A VMM checks
// there, before the first ring a guest controls is parsed, that it is
// jailed. Call it before the guest runs.
func (m *MMIO) SetQueueGate(gate func() error) {
	m.mu.Lock()
	m.gate = gate
	m.mu.Unlock()
}

// passGate runs the queue gate, if any. Called with mu held.
func (m *MMIO) passGate() error {
	if m.gate == nil {
		return nil
	}
	if err := m.gate(); err != nil {
		return fmt.Errorf("virtio-mmio: queue gate: %w", err)
	}
	return nil
}

// start activates the device on qs and kicks every queue. Called with mu
// held.
func (m *MMIO) start(qs []*queue.Queue) {
	kicks := make([]chan struct{}, len(qs))
	recv := make([]<-chan struct{}, len(qs))
	for i := range kicks {
		kicks[i] = make(chan struct{}, 1)
		recv[i] = kicks[i]
	}
	m.kicks.Store(&kicks)
	a := &virtio.Activation{Mem: m.mem, Features: m.drvFeatures, Queues: qs, Kicks: recv, Irq: irqLine{m}}
	if err := m.dev.Activate(a); err != nil {
		m.kicks.Store(nil)
		m.fail(fmt.Errorf("activate: %w", err))
		return
	}
	m.active, m.live = true, qs
	// Chains posted before DRIVER_OK (or before a restore) were notified
	// to nobody.
	for _, k := range kicks {
		k <- struct{}{}
	}
}

// reset returns the transport and device to their initial state. Called
// with mu held.
func (m *MMIO) reset() {
	if m.active {
		m.dev.Reset()
		m.active = false
	}
	m.kicks.Store(nil)
	m.live, m.paused, m.restored = nil, false, nil
	m.status, m.devFeatSel, m.drvFeatSel, m.drvFeatures, m.queueSel = 0, 0, 0, 0, 0
	clear(m.queues)
	m.intStatus.Store(0)
	m.needsReset.Store(false)
}

// fail marks the device broken: DEVICE_NEEDS_RESET plus a config interrupt.
func (m *MMIO) fail(err error) {
	m.log.Warn("virtio-mmio: device needs reset", "err", err)
	m.needsReset.Store(true)
	m.raise(InterruptConfigChange)
}

func (m *MMIO) raise(bit uint32) {
	m.intStatus.Or(bit)
	if err := m.irq.Trigger(); err != nil {
		m.log.Warn("virtio-mmio: raise interrupt", "err", err)
	}
}

// Notify tells the device the driver has made buffers available on queue.
// It never blocks: notifications coalesce until the device looks.
func (m *MMIO) Notify(queue uint16) {
	k := m.kicks.Load()
	if k == nil || int(queue) >= len(*k) {
		return
	}
	select {
	case (*k)[queue] <- struct{}{}:
	default:
	}
}

// Close stops the device and closes it if it holds resources (io.Closer).
func (m *MMIO) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	ratelog.Flush(m.log)
	if m.active {
		m.dev.Reset()
		m.active = false
	}
	m.kicks.Store(nil)
	if c, ok := m.dev.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// irqLine is the Interrupter a device gets on activation.
type irqLine struct{ m *MMIO }

func (l irqLine) UsedBuffer()          { l.m.raise(InterruptUsedBuffer) }
func (l irqLine) NeedsReset(err error) { l.m.fail(err) }
