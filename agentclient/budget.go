package agentclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// Budget bounds the memory that large agent messages (a cell's result or
// rich-result event of more than one frame) hold in the host at once,
// across every Client that shares it: a weighted semaphore of bytes.
//
// Why: a guest may return a result of up to proto.MaxAgentMessage bytes,
// and every sandbox may do so at the same moment, in a loop. Without a
// bound across sandboxes, N guests make the daemon hold N such results.
//
// A message is charged when its first frame arrives, before any of it is
// held: the most it can cost (messageCharge of the Conn's bound), cut to
// what it cost once its last frame is in. The charge is kept while the
// message is joined and decoded and, for a cell's result, until RunCell
// returns it; then it is released. A message that finds the budget full
// waits (its guest's stream waits with it: nothing more is read) for up to
// BudgetWait; past that, a result is refused with a DaemonBusy error result
// (the sandbox is kept) and a streamed rich result is dropped (the final
// result carries it), never held.
type Budget struct {
	limit int64

	mu         sync.Mutex
	used, peak int64
	wake       chan struct{} // closed (and replaced) on every release
}

// messageCharge is what a message of n bytes is charged: its bytes once
// joined, and its decoded strings once more.
func messageCharge(n int64) int64 { return 2 * n }

// MinBudget is the smallest budget: one maximal message's charge, so that
// every message the protocol allows can be taken alone.
var MinBudget = messageCharge(proto.MaxAgentMessage)

// BudgetWait bounds how long a large message waits for room in the budget.
// Its guest's write waits as long, so it is well under the agent's
// WriteTimeout (30 s without progress; guestinit/agent progress.go): a
// guest must never give up on a message the host was about to take.
const BudgetWait = 20 * time.Second

// NewBudget returns a budget of limit bytes, at least MinBudget.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: max(limit, MinBudget), wake: make(chan struct{})}
}

// Limit returns the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// InUse returns the bytes charged now.
func (b *Budget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Peak returns the most bytes ever charged at once.
func (b *Budget) Peak() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// errBudgetBusy is a message that waited its BudgetWait.
var errBudgetBusy = errors.New("the daemon's result memory budget stayed full")

// acquire charges n bytes (n <= Limit), waiting until they fit, ctx ends
// or wait passes.
func (b *Budget) acquire(ctx context.Context, n int64, wait time.Duration) error {
	if n > b.limit {
		return fmt.Errorf("a charge of %d bytes is past the budget of %d", n, b.limit)
	}
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.peak = max(b.peak, b.used)
			b.mu.Unlock()
			return nil
		}
		w := b.wake
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-w:
		case <-timeout:
			return errBudgetBusy
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release returns n charged bytes.
func (b *Budget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.wake)
	b.wake = make(chan struct{})
	b.mu.Unlock()
}

// defaultBudget is the budget of Clients that were given none.
var defaultBudget atomic.Pointer[Budget]

// SetDefaultBudget sets the budget shared by every Client not given one
// of its own (nil: none). It is the process's: memory is.
func SetDefaultBudget(b *Budget) { defaultBudget.Store(b) }

// SetBudget sets the budget of c's connections opened from now on (nil:
// the default budget).
func (c *Client) SetBudget(b *Budget) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget = b
}

func (c *Client) currentBudget() *Budget {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.budget != nil {
		return c.budget
	}
	return defaultBudget.Load()
}
