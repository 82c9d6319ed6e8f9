package queue

import (
	"fmt"

	"github.com/cellvm/cellvm/guestmem"
)

// State is where the device side of a queue stands: its configuration and
// the device's three indices. The rings themselves are in guest memory, so
// State and a copy of that memory are the whole queue; a snapshot keeps
// both, and a queue restored from them carries on where this one stopped.
type State struct {
	Config    Config
	LastAvail uint16 // next available entry the device will pop
	UsedIdx   uint16 // next used entry the device will fill
	Signalled uint16 // UsedIdx when the device last considered an interrupt
}

// Save returns the queue's state. The device must not be using the queue.
func (q *Queue) Save() State {
	return State{Config: q.cfg, LastAvail: q.lastAvail, UsedIdx: q.usedIdx, Signalled: q.signalled}
}

// Restore rebuilds a queue from st over mem, which must be the guest memory
// saved with it: the configuration is checked as New checks it, and the
// used index in memory must be the one the device last published.
func Restore(mem guestmem.Memory, st State, maxSize uint16) (*Queue, error) {
	q, err := New(mem, st.Config, maxSize)
	if err != nil {
		return nil, err
	}
	idx, err := Load16(mem, q.usedIdxAddr())
	if err != nil {
		return nil, fmt.Errorf("%w: used idx: %w", ErrMalformed, err)
	}
	if idx != st.UsedIdx {
		return nil, fmt.Errorf("%w: used idx in memory is %d, the saved queue's is %d (memory and state are not from the same snapshot)", ErrMalformed, idx, st.UsedIdx)
	}
	q.lastAvail, q.usedIdx, q.signalled = st.LastAvail, st.UsedIdx, st.Signalled
	return q, nil
}

// UndoPop puts back the chain the last Pop returned, which the device has
// not pushed: a device stopping for a snapshot with a chain in hand (an rx
// buffer waiting for a frame) returns it, so the restored device pops it
// again instead of losing it.
func (q *Queue) UndoPop() { q.lastAvail-- }

// AvailIdx reads the driver's available index.
func (q *Queue) AvailIdx(mem guestmem.Memory) (uint16, error) {
	idx, err := Load16(mem, q.availIdxAddr())
	if err != nil {
		return 0, fmt.Errorf("%w: avail idx: %w", ErrMalformed, err)
	}
	return idx, nil
}

// NotifyOnNext asks the driver, with EVENT_IDX, to notify the device when
// it makes its next chain available, whatever the device has consumed: it
// sets avail_event to the current available index. Without EVENT_IDX the
// driver notifies anyway.
func (q *Queue) NotifyOnNext(mem guestmem.Memory) error {
	if !q.cfg.EventIdx {
		return nil
	}
	idx, err := q.AvailIdx(mem)
	if err != nil {
		return err
	}
	if err := Store16(mem, q.availEventAddr(), idx); err != nil {
		return fmt.Errorf("%w: avail_event: %w", ErrMalformed, err)
	}
	return nil
}
