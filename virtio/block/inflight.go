package block

import (
	"fmt"

	"github.com/cellvm/cellvm/virtio"
)

// maxInFlight bounds the requests the device works on at once, each on a
// goroutine of its own (a blocking preadv or pwritev holds an OS thread).
// Linux's readahead keeps a few requests outstanding; eight is more than
// it uses on a small guest, and few enough threads for a VMM that shares
// the host's CPUs with its vCPUs. A guest cannot raise it: the queue
// goroutine pops a chain only while fewer are in flight.
const maxInFlight = 8

// completion is a request done: its chain's head and the bytes written to
// the chain.
type completion struct {
	head    uint16
	written uint32
}

// run is the queue goroutine. It owns the queue: it pops chains while fewer
// than maxInFlight are in flight, hands each to a request goroutine, and
// pushes what they complete, as many as are done at once, then raises one
// interrupt for the batch (if the driver wants it: EVENT_IDX or
// NO_INTERRUPT). Requests complete out of order, which virtio-blk allows.
// On stop it waits for every request in flight and pushes it, so a Pause
// leaves no chain popped and not pushed. A broken queue stops it after the
// requests in flight have returned; the device then needs a reset.
func (b *Block) run(a *virtio.Activation, stop <-chan struct{}) {
	q := a.Queues[0]
	done := make(chan completion, maxInFlight)
	inFlight := 0
	var broken error
	// finish pushes c (unless the queue is broken).
	finish := func(c completion) {
		inFlight--
		if broken == nil {
			if err := q.Push(a.Mem, c.head, c.written); err != nil {
				broken = fmt.Errorf("virtio-blk: %w", err)
			}
		}
	}
	for {
		for broken == nil && inFlight < maxInFlight {
			c, err := q.Pop(a.Mem)
			if err != nil {
				broken = fmt.Errorf("virtio-blk: %w", err)
				break
			}
			if c == nil {
				break
			}
			inFlight++
			go func() { done <- completion{c.Head, b.handle(a, c)} }()
		}
		stopping := false
		if broken == nil {
			select {
			case <-stop:
				stopping = true
			case c := <-done:
				finish(c)
			case <-a.Kicks[0]:
				continue
			}
		}
		// Push what is done: everything, when stopping or broken.
		for inFlight > 0 {
			if stopping || broken != nil {
				finish(<-done)
				continue
			}
			select {
			case c := <-done:
				finish(c)
				continue
			default:
			}
			break
		}
		if broken != nil {
			a.Irq.NeedsReset(broken)
			return
		}
		a.SignalUsed(q)
		if stopping {
			return
		}
	}
}
