package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// FuzzAdmission drives the slots and the line with a sequence of starts
// (plain and priority, waiting or tried at once), releases, give-ups and a
// close, and checks after each step that the admission settles where its
// callers are: every slot counted is held by a start that was told so,
// every start still waiting is in the line once, the line never holds
// more plain starts than its bound, each kind is granted in the order it
// came, and refusals and grants are counted as they were answered. At the
// end, with everything given back, nothing is held and nothing waits.
func FuzzAdmission(f *testing.F) {
	f.Add(uint8(0), uint8(1), []byte{0, 0, 0, 3, 3, 3})
	f.Add(uint8(1), uint8(2), []byte{2, 2, 0, 1, 0, 0, 4, 3, 3, 1, 3, 3, 3})
	f.Add(uint8(0), uint8(3), []byte{2, 0, 0, 5, 0, 2, 3})
	f.Add(uint8(2), uint8(0), []byte{0, 1, 0, 1, 0, 1, 2, 4, 4, 3, 3, 3, 3})
	f.Fuzz(func(t *testing.T, slotsIn, lineIn uint8, ops []byte) {
		if len(ops) > 48 {
			ops = ops[:48]
		}
		a := newAdmission(int(slotsIn%3)+1, int(lineIn%4)-1) // line: none, default, 1, 2
		type pending struct {
			seq      int
			priority bool
			cancel   context.CancelFunc
			done     <-chan admitted
		}
		var (
			held      []func()
			waiting   []*pending
			seq       int
			granted   = map[bool]int{} // the last seq granted, by kind
			nAdmitted uint64           // answers that granted a slot
			nRefused  uint64           // answers that refused for a full line
			closed    bool
		)
		// collect takes in the answers that arrived.
		collect := func() {
			left := waiting[:0]
			for _, p := range waiting {
				select {
				case r := <-p.done:
					p.cancel()
					switch {
					case r.err == nil:
						if p.seq < granted[p.priority] {
							t.Fatalf("start %d (priority %v) granted after start %d of its kind", p.seq, p.priority, granted[p.priority])
						}
						granted[p.priority] = p.seq
						held = append(held, r.release)
						nAdmitted++
					case errors.Is(r.err, sandbox.ErrQueueFull):
						nRefused++
					case errors.Is(r.err, context.Canceled), errors.Is(r.err, errAdmissionClosed):
					default:
						t.Fatalf("start %d: unexpected %v", p.seq, r.err)
					}
				default:
					left = append(left, p)
				}
			}
			waiting = left
		}
		// settle waits until every start has answered or is in the line,
		// then checks the admission against its callers.
		settle := func(step int) {
			deadline := time.Now().Add(10 * time.Second)
			for {
				collect()
				a.mu.Lock()
				running, line := a.running, len(a.line)
				plain := a.plainLocked()
				a.mu.Unlock()
				if running == len(held) && line == len(waiting) {
					if running > a.slots {
						t.Fatalf("step %d: %d slots taken of %d", step, running, a.slots)
					}
					if plain > a.maxLine {
						t.Fatalf("step %d: %d plain starts in a line of %d", step, plain, a.maxLine)
					}
					st := a.stats()
					if st.Admitted != nAdmitted || st.Refused != nRefused {
						t.Fatalf("step %d: stats %+v, callers saw %d admitted and %d refused", step, st, nAdmitted, nRefused)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("step %d: did not settle: %d slots taken, %d held; %d in the line, %d waiting", step, running, len(held), line, len(waiting))
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		for i, op := range ops {
			switch op % 6 {
			case 0, 1: // a start that waits its turn
				ctx, cancel := context.WithCancel(context.Background())
				seq++
				waiting = append(waiting, &pending{seq: seq, priority: op%6 == 1, cancel: cancel, done: admitAsync(ctx, a, op%6 == 1)})
			case 2: // a start that takes a slot only if it is free now
				st := a.stats()
				rel, ok := a.tryAdmit(false)
				if ok {
					if closed || st.Starting >= st.Slots || st.Waiting > 0 {
						t.Fatalf("step %d: try took a slot with %+v (closed %v)", i, st, closed)
					}
					held = append(held, rel)
					nAdmitted++
				} else if !closed && st.Starting < st.Slots && st.Waiting == 0 {
					t.Fatalf("step %d: try found no slot with %+v", i, st)
				}
			case 3: // the oldest holder gives its slot back (twice)
				if len(held) > 0 {
					held[0]()
					held[0]()
					held = held[1:]
				}
			case 4: // the oldest waiter gives up
				if len(waiting) > 0 {
					waiting[0].cancel()
				}
			case 5:
				a.close()
				closed = true
			}
			settle(i)
		}
		// The waiters give up first: a release while one waits would
		// grant it, and two grants in one step answer in any order.
		for _, p := range waiting {
			p.cancel()
		}
		for deadline := time.Now().Add(10 * time.Second); len(waiting) > 0; time.Sleep(100 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d starts still wait after giving up", len(waiting))
			}
			settle(len(ops))
		}
		for _, r := range held {
			r()
		}
		held = held[:0]
		settle(len(ops) + 1)
		if st := a.stats(); st.Starting != 0 || st.Waiting != 0 {
			t.Fatalf("everything given back: %+v", st)
		}
	})
}
