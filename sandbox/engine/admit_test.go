package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// admitted is the outcome of one admit call run in a goroutine.
type admitted struct {
	release func()
	waited  time.Duration
	err     error
}

// admitAsync starts an admit and returns where its outcome arrives.
func admitAsync(ctx context.Context, a *admission, priority bool) <-chan admitted {
	ch := make(chan admitted, 1)
	go func() {
		r, w, err := a.admit(ctx, priority)
		ch <- admitted{r, w, err}
	}()
	return ch
}

// waitLine waits until n starts wait in a's line.
func waitLine(t *testing.T, a *admission, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for a.stats().Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("line %+v, want %d waiting", a.stats(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// notYet checks that no outcome arrived on ch (it waits in the line).
func notYet(t *testing.T, what string, ch <-chan admitted) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s was admitted or refused while it should wait: %+v", what, r)
	default:
	}
}

func mustAdmit(t *testing.T, what string, ch <-chan admitted) admitted {
	t.Helper()
	r := <-ch
	if r.err != nil {
		t.Fatalf("%s: %v", what, r.err)
	}
	return r
}

// TestAdmissionSlotsLineAndRefusal: starts take the free slots at once,
// the next wait in order, and one more than the line holds is refused at
// once with ErrQueueFull (an ErrFull) and a Retry-After; releases hand
// the slots on in order, and a second release does nothing.
func TestAdmissionSlotsLineAndRefusal(t *testing.T) {
	ctx := context.Background()
	a := newAdmission(2, 2)
	relA, waited, err := a.admit(ctx, false)
	if err != nil || waited != 0 {
		t.Fatalf("first start: waited %v, %v", waited, err)
	}
	relB, _, err := a.admit(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	c := admitAsync(ctx, a, false)
	waitLine(t, a, 1)
	d := admitAsync(ctx, a, false)
	waitLine(t, a, 2)

	_, _, err = a.admit(ctx, false)
	if !errors.Is(err, sandbox.ErrQueueFull) || !errors.Is(err, sandbox.ErrFull) {
		t.Fatalf("start past the line: %v, want ErrQueueFull (an ErrFull)", err)
	}
	if ra, ok := sandbox.RetryAfter(err); !ok || ra < time.Second || ra > time.Minute {
		t.Errorf("refusal's Retry-After %v (%v), want 1 s to 1 min", ra, ok)
	}
	if !strings.Contains(err.Error(), "retry after") {
		t.Errorf("refusal %q does not say when to retry", err)
	}
	if st := a.stats(); st != (sandbox.BootQueue{Slots: 2, Starting: 2, Waiting: 2, MaxWaiting: 2, Admitted: 2, Refused: 1}) {
		t.Errorf("stats %+v", st)
	}

	notYet(t, "the third start", c)
	relA()
	relA() // a second release gives back nothing more
	rc := mustAdmit(t, "the third start", c)
	notYet(t, "the fourth start", d)
	if st := a.stats(); st.Starting != 2 || st.Waiting != 1 {
		t.Errorf("after one release: %+v, want 2 starting and 1 waiting", st)
	}
	relB()
	rd := mustAdmit(t, "the fourth start", d)
	if rc.waited <= 0 || rd.waited <= 0 {
		t.Errorf("waits %v and %v: want both reported", rc.waited, rd.waited)
	}
	rc.release()
	rd.release()
	if st := a.stats(); st.Starting != 0 || st.Waiting != 0 || st.Admitted != 4 {
		t.Errorf("all released: %+v", st)
	}
}

// TestAdmissionTryAdmit: tryAdmit takes a free slot at once; with none
// free it takes nothing, lines nothing up and refuses nothing; its
// release hands the slot to the line like admit's.
func TestAdmissionTryAdmit(t *testing.T) {
	ctx := context.Background()
	a := newAdmission(1, 2)
	rel, ok := a.tryAdmit(false)
	if !ok {
		t.Fatal("try with the slot free took nothing")
	}
	if _, ok := a.tryAdmit(false); ok {
		t.Fatal("try with the slot taken took one")
	}
	if st := a.stats(); st != (sandbox.BootQueue{Slots: 1, Starting: 1, MaxWaiting: 2, Admitted: 1}) {
		t.Errorf("after a try that found no slot: %+v, want nothing lined up or refused", st)
	}
	plain := admitAsync(ctx, a, false)
	waitLine(t, a, 1)
	rel()
	rp := mustAdmit(t, "the start that waited", plain)
	// The slot is the waiter's: the next try finds none.
	if _, ok := a.tryAdmit(true); ok {
		t.Fatal("try took a slot the waiter holds")
	}
	rp.release()
	if st := a.stats(); st.Starting != 0 || st.Waiting != 0 || st.Refused != 0 {
		t.Errorf("all released: %+v", st)
	}
}

// TestAdmissionPriority: a template build's start takes the next free
// slot before the creates waiting, and is not refused for a full line.
func TestAdmissionPriority(t *testing.T) {
	ctx := context.Background()
	a := newAdmission(1, 1)
	rel, _, err := a.admit(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	plain := admitAsync(ctx, a, false)
	waitLine(t, a, 1)
	if _, _, err := a.admit(ctx, false); !errors.Is(err, sandbox.ErrQueueFull) {
		t.Fatalf("plain start past the line: %v", err)
	}
	prio := admitAsync(ctx, a, true)
	waitLine(t, a, 2)
	rel()
	p := mustAdmit(t, "the priority start", prio)
	notYet(t, "the plain start", plain)
	p.release()
	mustAdmit(t, "the plain start", plain).release()
}

// TestAdmissionCancelLeavesNothing: a start whose context ends while it
// waits leaves the line and holds no slot, including when the end races
// with the grant.
func TestAdmissionCancelLeavesNothing(t *testing.T) {
	a := newAdmission(1, 4)
	rel, _, err := a.admit(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := admitAsync(ctx, a, false)
	waitLine(t, a, 1)
	cancel()
	if r := <-ch; !errors.Is(r.err, context.Canceled) || r.release != nil {
		t.Fatalf("cancelled wait: %+v, want context.Canceled and no slot", r)
	}
	if st := a.stats(); st.Waiting != 0 || st.Starting != 1 {
		t.Fatalf("after a cancelled wait: %+v", st)
	}
	rel()

	// Cancels racing with releases: whatever each wait's outcome, no
	// slot is left held once the winners release theirs.
	for range 200 {
		hold, _, err := a.admit(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		ch := admitAsync(ctx, a, false)
		waitLine(t, a, 1)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); cancel() }()
		go func() { defer wg.Done(); hold() }()
		wg.Wait()
		if r := <-ch; r.err == nil {
			r.release()
		}
	}
	if st := a.stats(); st.Starting != 0 || st.Waiting != 0 {
		t.Fatalf("after racing cancels: %+v, want nothing held", st)
	}
}

// TestAdmissionClose: closing ends the waits and refuses later starts;
// the slots held are still released.
func TestAdmissionClose(t *testing.T) {
	ctx := context.Background()
	a := newAdmission(1, 4)
	rel, _, err := a.admit(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	ch := admitAsync(ctx, a, true)
	waitLine(t, a, 1)
	a.close()
	a.close()
	if r := <-ch; !errors.Is(r.err, errAdmissionClosed) {
		t.Errorf("wait at close: %v", r.err)
	}
	if _, _, err := a.admit(ctx, true); !errors.Is(err, errAdmissionClosed) {
		t.Errorf("start after close: %v", err)
	}
	rel()
	if st := a.stats(); st.Starting != 0 || st.Waiting != 0 {
		t.Errorf("after close: %+v", st)
	}
}

// TestAdmissionDefaults: one slot per CPU and 4 waiting per slot; a
// negative line is none.
func TestAdmissionDefaults(t *testing.T) {
	a := newAdmission(0, 0)
	if a.slots != DefaultBootConcurrency() || a.maxLine != DefaultBootQueuePerSlot*a.slots {
		t.Errorf("defaults: %d slots, line %d", a.slots, a.maxLine)
	}
	if a := newAdmission(3, -1); a.maxLine != 0 {
		t.Errorf("negative line: %d, want 0", a.maxLine)
	}
}

// holdSlots takes every slot of m's admission, for a test that makes its
// starts wait; the release runs at cleanup too.
func holdSlots(t *testing.T, m *VMManager) func() {
	t.Helper()
	var rels []func()
	for range m.admit.slots {
		r, _, err := m.admit.admit(context.Background(), false)
		if err != nil {
			t.Fatal(err)
		}
		rels = append(rels, r)
	}
	release := sync.OnceFunc(func() {
		for _, r := range rels {
			r()
		}
	})
	t.Cleanup(release)
	return release
}

// createInLine starts a create on m, whose slots are held, and waits until
// it is in the line; cancel gives it up, and its error arrives on errc.
func createInLine(t *testing.T, m *VMManager) (cancel context.CancelFunc, errc <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() {
		_, err := m.Create(ctx, sandbox.Config{})
		ch <- err
	}()
	waitLine(t, m.admit, 1)
	return cancel, ch
}

// TestCreateWaitsForASlotAndBootsFromItsAdmission: with the only slot
// held past the boot timeout, a create waits in the line, then boots and
// succeeds: its deadline counts from its admission. Its answer reports
// the wait.
func TestCreateWaitsForASlotAndBootsFromItsAdmission(t *testing.T) {
	const boot = 5 * time.Second
	m, _, _ := newRoleManager(t, "agent", func(o *Options) { o.BootConcurrency, o.BootTimeout = 1, boot })
	release := holdSlots(t, m)
	type created struct {
		info sandbox.Info
		err  error
	}
	ch := make(chan created, 1)
	go func() {
		info, err := m.Create(context.Background(), sandbox.Config{})
		ch <- created{info, err}
	}()
	waitLine(t, m.admit, 1)
	if c, _ := m.Capacity(context.Background()); c.Boots == nil || c.Boots.Waiting != 1 || c.Boots.Slots != 1 {
		t.Errorf("capacity's boots while one waits: %+v", c.Boots)
	}
	time.Sleep(boot + time.Second) // past the boot timeout, counted from the request
	release()
	c := <-ch
	if c.err != nil {
		t.Fatalf("create that waited for its slot: %v", c.err)
	}
	defer m.Delete(context.Background(), c.info.ID)
	if c.info.QueuedMS < (boot + time.Second).Milliseconds() {
		t.Errorf("queued_ms %d, want at least the %v it waited", c.info.QueuedMS, boot+time.Second)
	}
	if got, _ := m.Get(context.Background(), c.info.ID); got.QueuedMS != c.info.QueuedMS {
		t.Errorf("get: queued_ms %d, create said %d", got.QueuedMS, c.info.QueuedMS)
	}
}

// TestCreateRefusedAtOnceWhenTheLineIsFull: with the slot held and the
// line full, a create is refused with ErrQueueFull and a Retry-After, and
// leaves nothing behind; so does one whose caller gives up in the line.
func TestCreateRefusedAtOnceWhenTheLineIsFull(t *testing.T) {
	m, state, _ := newRoleManager(t, "agent", func(o *Options) { o.BootConcurrency, o.BootQueue = 1, 1 })
	holdSlots(t, m)
	cancel, errc := createInLine(t, m)
	_, err := m.Create(context.Background(), sandbox.Config{})
	if !errors.Is(err, sandbox.ErrQueueFull) || !errors.Is(err, sandbox.ErrFull) {
		t.Fatalf("create past the line: %v, want ErrQueueFull", err)
	}
	if _, ok := sandbox.RetryAfter(err); !ok {
		t.Errorf("refusal %v says no Retry-After", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("create given up in the line: %v, want context.Canceled", err)
	}
	if st := m.admit.stats(); st.Waiting != 0 || st.Refused != 1 {
		t.Errorf("line after: %+v", st)
	}
	assertNothingLeft(t, m, state)
}

// TestManagerCloseEndsTheLine: a create waiting for a slot when the
// manager closes fails at once and leaves nothing.
func TestManagerCloseEndsTheLine(t *testing.T) {
	m, state, _ := newRoleManager(t, "agent", func(o *Options) { o.BootConcurrency = 1 })
	holdSlots(t, m)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), sandbox.Config{})
		errc <- err
	}()
	waitLine(t, m.admit, 1)
	m.Close()
	if err := <-errc; !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("create waiting at close: %v, want ErrBusy (shutting down)", err)
	}
	assertNothingLeft(t, m, state)
}

// TestResumeRefusedForAFullLineStaysPaused: a resume that finds the slot
// taken and no room in the line is refused with ErrQueueFull before its
// image is used, so the sandbox stays paused and resumes once a slot is
// free, its variables intact.
func TestResumeRefusedForAFullLineStaysPaused(t *testing.T) {
	m, _ := newPausableManager(t, func(o *Options) { o.BootConcurrency, o.BootQueue = 1, -1 })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = 42")
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	release := holdSlots(t, m)
	if err := m.Resume(ctx, info.ID); !errors.Is(err, sandbox.ErrQueueFull) || !strings.Contains(err.Error(), "stays paused") {
		t.Fatalf("resume with the line full: %v, want ErrQueueFull saying it stays paused", err)
	}
	if st := stateOf(t, m, info.ID); st != sandbox.StatePaused {
		t.Fatalf("state after a refused resume: %s, want paused", st)
	}
	release()
	if err := m.Resume(ctx, info.ID); err != nil {
		t.Fatalf("resume once the slot is free: %v", err)
	}
	if got := cellText(t, m, info.ID, "x"); got != "42" {
		t.Errorf("after the resume x = %q, want 42", got)
	}
}
