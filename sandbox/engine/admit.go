package engine

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Admission bounds how many VMs start at once. A boot (and, less so, a
// restore) is CPU-bound: the guest kernel's init on one vCPU thread, then
// the agent's start. A burst of creates that all boot at once shares the
// host's CPUs, each boot takes as long as all of them, and each runs past
// the boot deadline (issue 28: 4 of 8 creates at once failed after 60 s on
// a 3-CPU host, with no boot at fault). So a VM start takes a slot first;
// those that find none wait in a bounded line, in order, and their boot
// deadline (Options.BootTimeout) counts from their admission, not from the
// request. When the line is full too, the start is refused at once with
// ErrQueueFull (503 and Retry-After in the API): a caller learns at once
// that the host is saturated instead of after a deadline.
//
// The default is one slot per CPU (runtime.NumCPU, which honours the
// daemon's affinity mask). A boot keeps about one CPU busy (the default
// machine has one vCPU; the VMM's device threads are light), so NumCPU
// boots fill the host without sharing a CPU, and each then boots about as
// fast as one alone. Half as many would leave CPUs idle during a burst and
// double its tail for nothing; more would share CPUs and bring back the
// deadline failures. The line holds 4 starts per slot by default, so a
// burst of 4x the host's CPUs in creates is taken in full.
//
// A template's build takes a slot before any create in the line
// (priority): otherwise a steady stream of creates, each booting cold
// because there is no template yet, could keep the template from ever
// being built. Priority starts do not count against the line's bound.

// DefaultBootQueuePerSlot is the line's default size per slot.
const DefaultBootQueuePerSlot = 4

// DefaultBootConcurrency is the default number of slots: one per CPU.
func DefaultBootConcurrency() int { return max(1, runtime.NumCPU()) }

// admitRetryFloor and admitRetryCeil bound the Retry-After of a refusal.
const (
	admitRetryFloor = time.Second
	admitRetryCeil  = time.Minute
	// admitHoldGuess is the hold time assumed before any start has been
	// measured.
	admitHoldGuess = 5 * time.Second
)

// errAdmissionClosed is a wait's error when the manager shuts down.
var errAdmissionClosed = fmt.Errorf("%w: the manager is shutting down", sandbox.ErrBusy)

// admitWaiter is one start in the line. granted is closed when it has a
// slot (under admission.mu, which also sets ok).
type admitWaiter struct {
	priority bool
	granted  chan struct{}
	ok       bool
}

// admission is the slots and the line. Its zero value is not usable; see
// newAdmission.
type admission struct {
	slots   int
	maxLine int

	mu      sync.Mutex
	running int
	line    []*admitWaiter // priority waiters first, each kind in order
	closed  bool
	// hold is a moving average of how long a start holds its slot, for
	// the Retry-After of a refusal.
	hold time.Duration
	// admitted and refused count starts since the manager began.
	admitted, refused uint64
}

// newAdmission returns slots slots (<= 0: DefaultBootConcurrency) and a
// line of maxLine (< 0: none; 0: DefaultBootQueuePerSlot per slot).
func newAdmission(slots, maxLine int) *admission {
	if slots <= 0 {
		slots = DefaultBootConcurrency()
	}
	switch {
	case maxLine == 0:
		maxLine = DefaultBootQueuePerSlot * slots
	case maxLine < 0:
		maxLine = 0
	}
	return &admission{slots: slots, maxLine: maxLine, hold: admitHoldGuess}
}

// admit waits for a slot: at once when one is free and no one waits
// before it, else in the line until one frees, ctx ends (the start then
// leaves nothing in the line) or the manager closes. A start that finds
// the line full is refused at once (*sandbox.QueueFullError). release gives the
// slot back (once; later calls do nothing); waited is the time spent in
// the line.
func (a *admission) admit(ctx context.Context, priority bool) (release func(), waited time.Duration, err error) {
	start := time.Now()
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, 0, errAdmissionClosed
	}
	if a.freeLocked(priority) {
		a.running++
		a.admitted++
		a.mu.Unlock()
		return a.releaser(start), 0, nil
	}
	if !priority && a.plainLocked() >= a.maxLine {
		a.refused++
		err := &sandbox.QueueFullError{Retry: a.retryLocked()}
		a.mu.Unlock()
		return nil, 0, err
	}
	w := &admitWaiter{priority: priority, granted: make(chan struct{})}
	at := len(a.line)
	if priority {
		at = a.aheadLocked(true)
	}
	a.line = append(a.line, nil)
	copy(a.line[at+1:], a.line[at:])
	a.line[at] = w
	a.mu.Unlock()

	select {
	case <-w.granted:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-w.granted:
	default:
		// Not granted: ctx ended first. Leave the line.
		a.removeLocked(w)
		return nil, time.Since(start), fmt.Errorf("waiting for a slot to start the VM: %w", ctx.Err())
	}
	if !w.ok { // closed: close empties the line without granting
		return nil, time.Since(start), errAdmissionClosed
	}
	waited = time.Since(start)
	return a.releaser(time.Now()), waited, nil
}

// tryAdmit takes a slot only where admit would grant one at once: a
// start that would wait is neither lined up nor refused (ok false), and
// calls admit for its turn. A create tries it while it reserves its
// sandbox, so that only a start that will run now takes a pooled VMM
// process with it (reserve): one waiting in the line, or refused, would
// hold a ready process idle or end it.
func (a *admission) tryAdmit(priority bool) (release func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || !a.freeLocked(priority) {
		return nil, false
	}
	a.running++
	a.admitted++
	return a.releaser(time.Now()), true
}

// freeLocked says a start of that priority would be granted a slot at
// once: one is free and no one it would wait behind is in the line.
func (a *admission) freeLocked(priority bool) bool {
	return a.running < a.slots && a.aheadLocked(priority) == 0
}

// aheadLocked counts the waiters a new start of that priority would wait
// behind: every priority waiter, and for a plain start every waiter.
func (a *admission) aheadLocked(priority bool) int {
	if !priority {
		return len(a.line)
	}
	n := 0
	for n < len(a.line) && a.line[n].priority {
		n++
	}
	return n
}

// plainLocked counts the waiters that are not priority ones.
func (a *admission) plainLocked() int { return len(a.line) - a.aheadLocked(true) }

func (a *admission) removeLocked(w *admitWaiter) {
	for i, x := range a.line {
		if x == w {
			a.line = append(a.line[:i], a.line[i+1:]...)
			return
		}
	}
}

// releaser returns the release of a slot taken at held.
func (a *admission) releaser(held time.Time) func() {
	return sync.OnceFunc(func() {
		d := time.Since(held)
		a.mu.Lock()
		defer a.mu.Unlock()
		a.running--
		a.hold = (3*a.hold + d) / 4
		a.grantLocked()
	})
}

// grantLocked hands free slots to the head of the line.
func (a *admission) grantLocked() {
	for a.running < a.slots && len(a.line) > 0 && !a.closed {
		w := a.line[0]
		a.line = a.line[1:]
		a.running++
		a.admitted++
		w.ok = true
		close(w.granted)
	}
}

// retryLocked estimates when a refused start would be admitted soon: once
// the line ahead of it has drained, slots at a time, each start holding
// its slot for the average hold.
func (a *admission) retryLocked() time.Duration {
	rounds := (len(a.line) + a.slots - 1) / a.slots
	d := time.Duration(max(1, rounds)) * a.hold
	return max(admitRetryFloor, min(admitRetryCeil, d)).Round(time.Second)
}

// close ends every wait with errAdmissionClosed and refuses later starts.
// Slots held are still released by their holders. Idempotent.
func (a *admission) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	a.closed = true
	for _, w := range a.line {
		close(w.granted) // ok stays false
	}
	a.line = nil
}

// stats reports the slots and the line, for Capacity.
func (a *admission) stats() sandbox.BootQueue {
	a.mu.Lock()
	defer a.mu.Unlock()
	return sandbox.BootQueue{Slots: a.slots, Starting: a.running, Waiting: len(a.line), MaxWaiting: a.maxLine,
		Admitted: a.admitted, Refused: a.refused}
}
