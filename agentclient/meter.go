package agentclient

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// meter sits between a session's connection and its proto.Conn. It reads
// frame headers as they pass and charges each large message (a response
// or event of more than one frame) to the Budget before a byte of it is
// handed up (see Budget). A message that gets no room is read and thrown
// away here, its frames never handed up: a streamed event is skipped (the
// cell goes on), a response ends the read with a *refusal.
//
// It is read by one goroutine at a time (the session's call); begin and
// settle are called by that call.
type meter struct {
	r      io.Reader
	budget *Budget // nil: no budget, everything passes
	max    int64   // the Conn's message bound

	ctx  context.Context
	wait time.Duration

	hdr  [proto.HeaderSize]byte
	out  []byte // header bytes still to hand up
	left int    // payload bytes of the current frame still to pass or drop
	more bool   // the current message goes on past the current frame
	typ  proto.FrameType
	size int64 // payload bytes of the current message so far

	charged int64 // the current message's charge, while it arrives
	held    int64 // every charge not yet released

	drop    bool // the current message is thrown away
	dropped int  // events thrown away in this call
	refused *refusal
	tail    []byte // the last bytes of a thrown-away response
	scratch []byte
}

// tailBytes is how much of a thrown-away response is kept to read its
// state_kept and killed_by, which a result carries after its large fields.
const tailBytes = 4 << 10

// budgetWait is BudgetWait, shortened by tests.
var budgetWait = BudgetWait

// budgetMargin is the time a call keeps, past a budget wait, to answer.
const budgetMargin = 2 * time.Second

// begin readies the meter for a call.
func (m *meter) begin(ctx context.Context) {
	m.ctx, m.dropped, m.refused = ctx, 0, nil
	m.wait = budgetWait
	if d, ok := ctx.Deadline(); ok {
		m.wait = max(min(m.wait, time.Until(d)-budgetMargin), 0)
	}
}

// settle releases every charge: the call is done with its messages.
func (m *meter) settle() {
	if m.budget != nil {
		m.budget.release(m.held)
	}
	m.held, m.charged = 0, 0
}

func (m *meter) Read(p []byte) (int, error) {
	for {
		if len(m.out) > 0 {
			n := copy(p, m.out)
			m.out = m.out[n:]
			return n, nil
		}
		if m.left > 0 && !m.drop {
			n, err := m.r.Read(p[:min(len(p), m.left)])
			m.left -= n
			return n, err
		}
		if m.left > 0 {
			if err := m.discard(); err != nil {
				return 0, err
			}
			continue
		}
		if m.drop && !m.more {
			m.drop = false
			if r := m.refused; r != nil {
				r.bytes, r.tail = m.size, m.tail
				return 0, r
			}
		}
		if err := m.header(); err != nil {
			return 0, err
		}
	}
}

// discard reads and throws away the current frame's payload, keeping the
// tail of a response.
func (m *meter) discard() error {
	if m.scratch == nil {
		m.scratch = make([]byte, 64<<10)
	}
	n, err := m.r.Read(m.scratch[:min(len(m.scratch), m.left)])
	m.left -= n
	if m.typ == proto.TypeResponse {
		m.tail = append(m.tail, m.scratch[:n]...)
		if len(m.tail) > 2*tailBytes {
			m.tail = append(m.tail[:0], m.tail[len(m.tail)-tailBytes:]...)
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// header reads the next frame's header and decides what to do with it.
func (m *meter) header() error {
	if _, err := io.ReadFull(m.r, m.hdr[:]); err != nil {
		return err
	}
	m.out = m.hdr[:]
	n := binary.BigEndian.Uint32(m.hdr[:4])
	raw := proto.FrameType(m.hdr[4])
	t, more := raw&^proto.FlagMore, raw&proto.FlagMore != 0
	if n == 0 || n-1 > proto.MaxFramePayload {
		if m.drop {
			return fmt.Errorf("%w: a frame of %d bytes", proto.ErrFrameTooLarge, n)
		}
		return nil // proto refuses it
	}
	m.left = int(n - 1)
	switch t {
	case proto.TypeHello, proto.TypeRequest, proto.TypeResponse, proto.TypeEvent:
	default:
		if m.drop {
			return fmt.Errorf("%w: %v frame inside a %v message", proto.ErrBadFrame, t, m.typ)
		}
		return nil // data, or unknown: proto's to judge
	}
	first := !m.more
	if first {
		m.settle() // the call has handled every message before this one
		m.typ, m.size = t, 0
	} else if t != m.typ && m.drop {
		return fmt.Errorf("%w: %v frame inside a %v message", proto.ErrBadFrame, t, m.typ)
	}
	m.size += int64(n - 1)
	m.more = more
	if m.drop {
		m.out = nil
		if m.size > m.max {
			return fmt.Errorf("%w: %v message over %d bytes", proto.ErrMessageTooLarge, t, m.max)
		}
		return nil
	}
	if first && more && m.budget != nil && (t == proto.TypeResponse || t == proto.TypeEvent) {
		charge := min(messageCharge(m.max), m.budget.Limit())
		if err := m.budget.acquire(m.ctx, charge, m.wait); err != nil {
			if m.ctx.Err() != nil {
				return err
			}
			m.out, m.drop, m.tail = nil, true, nil
			if t == proto.TypeEvent {
				m.dropped++
			} else {
				m.refused = &refusal{limit: m.budget.Limit(), waited: m.wait}
			}
			return nil
		}
		m.charged = charge
		m.held += charge
	}
	if !more && m.charged > 0 {
		// The message is in: cut its charge to what it costs.
		if cost := messageCharge(m.size); cost < m.charged {
			m.budget.release(m.charged - cost)
			m.held -= m.charged - cost
		}
		m.charged = 0
	}
	return nil
}

// refusal is a cell's result that the budget had no room for: it was read
// and thrown away.
type refusal struct {
	limit  int64
	waited time.Duration
	bytes  int64
	tail   []byte
}

func (r *refusal) Error() string {
	return fmt.Sprintf("a %d-byte result found the daemon's result memory (%d MiB) in use for %v", r.bytes, r.limit>>20, r.waited)
}

// DaemonBusy is the error name of a result refused for want of memory.
const DaemonBusy = "DaemonBusy"

// result is the error result that stands for the refused one: the cell
// ran, its sandbox is kept, and what it did to its state is what the
// thrown-away result said (read from its tail).
func (r *refusal) result() cell.Result {
	res := cell.Result{Status: cell.StatusError,
		Error: &cell.Error{Name: DaemonBusy, Value: fmt.Sprintf(
			"the cell ran, but its result (%d bytes) was dropped: the daemon's memory for results (%d MiB, shared by every sandbox) stayed in use for %v; the sandbox is kept. Run it again, or return less (save large output to a file and download it)",
			r.bytes, r.limit>>20, r.waited.Round(time.Second))}}
	res.StateKept, res.KilledBy = tailState(r.tail)
	return res
}

// tailState reads state_kept and killed_by from the end of a result's
// JSON. They follow every large field, so the last occurrence of each key
// is the result's own (a key inside a string would have its quotes
// escaped). Without them, the state is not claimed kept.
func tailState(tail []byte) (bool, cell.KilledBy) {
	kept := false
	if i := bytes.LastIndex(tail, []byte(`"state_kept":`)); i >= 0 {
		kept = bytes.HasPrefix(tail[i+len(`"state_kept":`):], []byte("true"))
	}
	var by cell.KilledBy
	if i := bytes.LastIndex(tail, []byte(`"killed_by":"`)); i >= 0 {
		v := tail[i+len(`"killed_by":"`):]
		if j := bytes.IndexByte(v, '"'); j >= 0 {
			switch k := cell.KilledBy(v[:j]); k {
			case cell.KilledByTimeout, cell.KilledByOOM, cell.KilledBySignal:
				by = k
			}
		}
	}
	return kept, by
}
