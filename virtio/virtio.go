// Package virtio holds what the virtio transport and its devices share: the
// Device interface a transport drives, the Activation a device is handed when
// the driver sets DRIVER_OK, and the virtio 1.x constants (device types,
// status bits, ring-level feature bits).
//
// The split is Firecracker's: the transport (virtio/mmio) owns the register
// model and the guest's queue configuration; a device (virtio/block, rng,
// vsock, net) owns its config space and does its work on its own goroutines,
// never on the vCPU thread that wrote QueueNotify. Everything a device reads
// out of a queue comes from the guest and is treated as hostile (see
// virtio/queue).
package virtio

import (
	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
)

// Device types (virtio 1.x, section 5).
const (
	TypeNet   uint32 = 1
	TypeBlock uint32 = 2
	TypeRNG   uint32 = 4
	TypeVsock uint32 = 19
)

// Device status bits (virtio 1.x, 2.1).
const (
	StatusAcknowledge      uint32 = 1
	StatusDriver           uint32 = 2
	StatusDriverOK         uint32 = 4
	StatusFeaturesOK       uint32 = 8
	StatusDeviceNeedsReset uint32 = 64
	StatusFailed           uint32 = 128
)

// Feature bits that are not device specific (virtio 1.x, 6).
const (
	FeatureIndirectDesc uint64 = 1 << 28
	FeatureEventIdx     uint64 = 1 << 29
	FeatureVersion1     uint64 = 1 << 32
)

// Device is what a transport needs of a device. A transport calls these
// methods from the vCPU thread, serialised: never two at once.
type Device interface {
	// DeviceType is the virtio device ID (TypeBlock, ...).
	DeviceType() uint32
	// Features are the device-specific feature bits offered to the driver.
	// The transport adds VERSION_1, INDIRECT_DESC and EVENT_IDX itself.
	Features() uint64
	// QueueMaxSizes gives, per queue, the largest size the device accepts
	// (a power of two). Its length is the number of queues.
	QueueMaxSizes() []uint16
	// ReadConfig fills p from the device config space at offset. Bytes out
	// of range read as zero.
	ReadConfig(offset uint64, p []byte)
	// WriteConfig writes p to the device config space at offset; writes to
	// read-only or out-of-range bytes are ignored.
	WriteConfig(offset uint64, p []byte)
	// Activate starts the device on its queues. It must return promptly:
	// work happens on the device's own goroutines.
	Activate(a *Activation) error
	// Reset stops the device's goroutines, waits for them, and returns the
	// device to its state before Activate. Reset on an inactive device is a
	// no-op.
	Reset()
}

// Pauser is a device that can stop and later carry on where it was without
// the driver noticing, which a snapshot needs of every device. Pause stops
// and waits for the goroutines that touch guest memory and the queues; when
// it returns, every chain the device popped is either pushed or put back
// (queue.Queue.UndoPop), so the queues' saved positions are exact. Resume
// starts them again on the same Activation; the transport then kicks every
// queue, as a restored device needs to look at chains posted meanwhile.
// The transport calls both with its lock held, never on an inactive device.
type Pauser interface {
	Pause()
	Resume()
}

// Interrupter is the transport side of a device's interrupt line.
type Interrupter interface {
	// UsedBuffer sets the used-buffer bit of the interrupt status and
	// raises the interrupt.
	UsedBuffer()
	// NeedsReset marks the device broken (DEVICE_NEEDS_RESET) and raises a
	// configuration-change interrupt. The device stops using its queues.
	NeedsReset(err error)
}

// Activation is what a device gets when the driver sets DRIVER_OK.
type Activation struct {
	Mem guestmem.Memory
	// Features are the negotiated features (device and ring bits).
	Features uint64
	// Queues has one entry per queue in QueueMaxSizes order; an entry is
	// nil when the driver did not set that queue up. A queue is used by
	// exactly one device goroutine at a time.
	Queues []*queue.Queue
	// Kicks receive a value when the driver notifies the queue of the same
	// index. They are buffered (1), so notifications coalesce, and are never
	// closed: a device stops on its own signal, not on a closed kick.
	Kicks []<-chan struct{}
	Irq   Interrupter
}

// SignalUsed raises the used-buffer interrupt for queue q unless the driver
// suppressed it (VIRTQ_AVAIL_F_NO_INTERRUPT, or used_event with EVENT_IDX).
// Call it from the goroutine that owns q, after a batch of Push calls.
func (a *Activation) SignalUsed(q *queue.Queue) {
	need, err := q.NeedsInterrupt(a.Mem)
	if err != nil {
		a.Irq.NeedsReset(err)
		return
	}
	if need {
		a.Irq.UsedBuffer()
	}
}
