// Package queue is the device side of the virtio 1.x split virtqueue: the
// descriptor table, the available ring the driver fills and the used ring
// the device fills, with indirect descriptors (VIRTIO_F_INDIRECT_DESC) and
// notification suppression (VIRTIO_F_EVENT_IDX).
//
// The rings live in guest memory and the guest is hostile, so every address
// and length read from them is checked against guest memory, every chain is
// bounded by the queue size (or the indirect table's length), and a
// malformed queue is reported as an error for the transport to turn into
// DEVICE_NEEDS_RESET. Nothing here panics or loops on guest data.
//
// A Queue is not safe for concurrent use: each queue is owned by one device
// goroutine.
package queue

import (
	"errors"
	"fmt"

	"github.com/cellvm/cellvm/guestmem"
)

// Descriptor flags (virtio 1.x, 2.7.5).
const (
	DescFlagNext     uint16 = 1
	DescFlagWrite    uint16 = 2
	DescFlagIndirect uint16 = 4
)

// Ring flags.
const (
	AvailFlagNoInterrupt uint16 = 1
	UsedFlagNoNotify     uint16 = 1
)

// Sizes of the ring structures.
const (
	DescSize      = 16
	usedElemSize  = 8
	availHdrSize  = 4 // flags, idx
	usedHdrSize   = 4 // flags, idx
	MaxQueueSize  = 32768
	descAlign     = 16
	availAlign    = 2
	usedAlign     = 4
	maxChainBytes = 1<<32 - 1
)

// ErrMalformed is wrapped by every error caused by a queue or chain that
// breaks the virtio rules. The device must stop using the queue.
var ErrMalformed = errors.New("malformed virtqueue")

// Config is the queue setup the driver wrote to the transport.
type Config struct {
	Size       uint16
	DescAddr   uint64 // descriptor table
	DriverAddr uint64 // available ring
	DeviceAddr uint64 // used ring
	// Indirect and EventIdx are the negotiated VIRTIO_F_INDIRECT_DESC and
	// VIRTIO_F_EVENT_IDX.
	Indirect bool
	EventIdx bool
}

// Queue is one split virtqueue, device side.
type Queue struct {
	cfg       Config
	lastAvail uint16 // next available ring entry to consume
	usedIdx   uint16 // next used ring entry to fill
	signalled uint16 // usedIdx when NeedsInterrupt last ran
}

// New checks cfg against the virtio rules and guest memory and returns the
// queue. maxSize is the device's QueueNumMax.
func New(mem guestmem.Memory, cfg Config, maxSize uint16) (*Queue, error) {
	if err := Validate(mem, cfg, maxSize); err != nil {
		return nil, err
	}
	return &Queue{cfg: cfg}, nil
}

// Validate checks a queue configuration: size a power of two no larger than
// maxSize, areas aligned and inside guest memory.
func Validate(mem guestmem.Memory, cfg Config, maxSize uint16) error {
	n := uint64(cfg.Size)
	if n == 0 || n&(n-1) != 0 || n > uint64(maxSize) || n > MaxQueueSize {
		return fmt.Errorf("%w: queue size %d (max %d, must be a power of two)", ErrMalformed, n, maxSize)
	}
	areas := []struct {
		name      string
		addr, len uint64
		align     uint64
	}{
		{"descriptor table", cfg.DescAddr, DescSize * n, descAlign},
		{"available ring", cfg.DriverAddr, availHdrSize + 2*n + 2, availAlign},
		{"used ring", cfg.DeviceAddr, usedHdrSize + usedElemSize*n + 2, usedAlign},
	}
	for _, a := range areas {
		if a.addr%a.align != 0 {
			return fmt.Errorf("%w: %s at %#x not %d-byte aligned", ErrMalformed, a.name, a.addr, a.align)
		}
		if _, err := mem.Slice(a.addr, a.len); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrMalformed, a.name, err)
		}
	}
	return nil
}

// Size is the number of entries in the queue.
func (q *Queue) Size() uint16 { return q.cfg.Size }

// Config returns the queue's configuration.
func (q *Queue) Config() Config { return q.cfg }

func (q *Queue) availIdxAddr() uint64  { return q.cfg.DriverAddr + 2 }
func (q *Queue) availRingAddr() uint64 { return q.cfg.DriverAddr + availHdrSize }
func (q *Queue) usedEventAddr() uint64 { return q.cfg.DriverAddr + availHdrSize + 2*uint64(q.cfg.Size) }
func (q *Queue) usedIdxAddr() uint64   { return q.cfg.DeviceAddr + 2 }
func (q *Queue) usedRingAddr() uint64  { return q.cfg.DeviceAddr + usedHdrSize }
func (q *Queue) availEventAddr() uint64 {
	return q.cfg.DeviceAddr + usedHdrSize + usedElemSize*uint64(q.cfg.Size)
}

// Available returns how many chains the driver has made available and the
// device has not yet popped. When there are none and EVENT_IDX is on, it
// first asks the driver to notify on the next one (avail_event) and then
// looks again, so a notification cannot be lost between the two.
func (q *Queue) Available(mem guestmem.Memory) (uint16, error) {
	n, err := q.pending(mem)
	if err != nil || n != 0 || !q.cfg.EventIdx {
		return n, err
	}
	if err := Store16(mem, q.availEventAddr(), q.lastAvail); err != nil {
		return 0, fmt.Errorf("%w: avail_event: %w", ErrMalformed, err)
	}
	return q.pending(mem)
}

func (q *Queue) pending(mem guestmem.Memory) (uint16, error) {
	idx, err := Load16(mem, q.availIdxAddr())
	if err != nil {
		return 0, fmt.Errorf("%w: avail idx: %w", ErrMalformed, err)
	}
	n := idx - q.lastAvail // wraps at 2^16 like the indices do
	if n > q.cfg.Size {
		return 0, fmt.Errorf("%w: avail idx %d is %d ahead of the device (queue size %d)", ErrMalformed, idx, n, q.cfg.Size)
	}
	return n, nil
}

// Pop takes the next available chain, or returns nil when there is none.
// An error (wrapping ErrMalformed or guestmem.ErrOutOfBounds) means the queue
// is broken; the head, if any, has been consumed.
func (q *Queue) Pop(mem guestmem.Memory) (*Chain, error) {
	n, err := q.Available(mem)
	if err != nil || n == 0 {
		return nil, err
	}
	slot := uint64(q.lastAvail % q.cfg.Size)
	b, err := mem.Slice(q.availRingAddr()+2*slot, 2)
	if err != nil {
		return nil, fmt.Errorf("%w: avail ring: %w", ErrMalformed, err)
	}
	q.lastAvail++
	head := uint16(b[0]) | uint16(b[1])<<8
	return ReadChain(mem, q.cfg, head)
}

// Push returns a chain to the driver: it writes the used element (head,
// written bytes) and then publishes the new used idx.
func (q *Queue) Push(mem guestmem.Memory, head uint16, written uint32) error {
	slot := uint64(q.usedIdx % q.cfg.Size)
	e, err := mem.Slice(q.usedRingAddr()+usedElemSize*slot, usedElemSize)
	if err != nil {
		return fmt.Errorf("%w: used ring: %w", ErrMalformed, err)
	}
	guestmem.MarkDirty(mem, q.usedRingAddr()+usedElemSize*slot, usedElemSize)
	putLE32(e[0:], uint32(head))
	putLE32(e[4:], written)
	q.usedIdx++
	if err := Store16(mem, q.usedIdxAddr(), q.usedIdx); err != nil {
		return fmt.Errorf("%w: used idx: %w", ErrMalformed, err)
	}
	return nil
}

// NeedsInterrupt says whether the driver wants an interrupt for the used
// entries pushed since the last call: with EVENT_IDX, when used idx has
// passed used_event; without, unless VIRTQ_AVAIL_F_NO_INTERRUPT is set.
func (q *Queue) NeedsInterrupt(mem guestmem.Memory) (bool, error) {
	old, cur := q.signalled, q.usedIdx
	q.signalled = cur
	if old == cur {
		return false, nil
	}
	if q.cfg.EventIdx {
		ev, err := Load16(mem, q.usedEventAddr())
		if err != nil {
			return false, fmt.Errorf("%w: used_event: %w", ErrMalformed, err)
		}
		return NeedEvent(ev, cur, old), nil
	}
	flags, err := Load16(mem, q.cfg.DriverAddr)
	if err != nil {
		return false, fmt.Errorf("%w: avail flags: %w", ErrMalformed, err)
	}
	return flags&AvailFlagNoInterrupt == 0, nil
}

// NeedEvent is vring_need_event: whether moving an index from old to cur
// crossed event, all modulo 2^16.
func NeedEvent(event, cur, old uint16) bool {
	return cur-event-1 < cur-old
}

func putLE32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
