package agentclient

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// TestBudgetConcurrentMaximalResults: 8 sandboxes return maximal results
// at once under a budget of two maximal messages: every cell gets its
// result, whole, and the bytes charged never pass the budget.
func TestBudgetConcurrentMaximalResults(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~1 GiB")
	}
	b := NewBudget(2 * MinBudget)
	dial := rawAgent(t, maximalAnswer(t))
	want := maximalResult()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for i := range 8 {
		c := New(dial)
		c.SetBudget(b)
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			events := 0
			res, err := c.RunCell(ctxT(t), "x", time.Minute, func(e cell.Event) {
				if e.Type == cell.EventResult {
					events++
				}
			})
			switch {
			case err != nil:
				errs <- err.Error()
			case len(res.Results) != 1 || len(res.Results[0].Data[cell.MIMEPNG]) != len(want.Results[0].Data[cell.MIMEPNG]) || res.Stdout != want.Stdout:
				errs <- "cell " + string(rune('0'+i)) + ": a partial result"
			case events != 1:
				errs <- "cell " + string(rune('0'+i)) + ": its rich result was not streamed"
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if p := b.Peak(); p > b.Limit() || p == 0 {
		t.Errorf("peak charge %d MiB, budget %d MiB", p>>20, b.Limit()>>20)
	}
	if n := b.InUse(); n != 0 {
		t.Errorf("%d bytes still charged after every cell returned", n)
	}
	t.Logf("8 maximal results under a %d MiB budget: peak charge %d MiB", b.Limit()>>20, b.Peak()>>20)
}

// TestBudgetFullRefusesResult: while the budget is full past the wait,
// the streamed rich result is skipped and the result is refused with a
// DaemonBusy error result that says the state was kept (as the dropped
// result did); nothing stays charged, and the next cell, with room, gets
// its whole result on the same client.
func TestBudgetFullRefusesResult(t *testing.T) {
	if testing.Short() {
		t.Skip("moves ~0.5 GiB")
	}
	defer func(w time.Duration) { budgetWait = w }(budgetWait)
	budgetWait = 200 * time.Millisecond
	b := NewBudget(MinBudget)
	c := New(rawAgent(t, maximalAnswer(t)))
	c.SetBudget(b)
	defer c.Close()
	if err := b.acquire(context.Background(), b.Limit(), time.Second); err != nil {
		t.Fatal(err)
	}
	events := 0
	res, err := c.RunCell(ctxT(t), "x", time.Minute, func(e cell.Event) {
		if e.Type == cell.EventResult {
			events++
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != DaemonBusy || !res.StateKept || res.KilledBy != cell.KilledByNone || len(res.Results) != 0 {
		t.Fatalf("result with the budget full = %+v, want a DaemonBusy error result with state kept", res)
	}
	if !strings.Contains(res.Error.Value, "sandbox is kept") {
		t.Errorf("error value %q does not say the sandbox is kept", res.Error.Value)
	}
	if events != 0 {
		t.Errorf("%d rich results passed on with the budget full", events)
	}
	b.release(b.Limit())
	if n := b.InUse(); n != 0 {
		t.Fatalf("%d bytes charged after a refused result", n)
	}
	res, err = c.RunCell(ctxT(t), "x", time.Minute, nil)
	if err != nil || len(res.Results) != 1 || res.Status != cell.StatusOK {
		t.Fatalf("next cell with room = %v results, %q, %v", len(res.Results), res.Status, err)
	}
}

// TestTailState reads a dropped result's state from its JSON's end, and
// is not fooled by the keys inside a string.
func TestTailState(t *testing.T) {
	for _, tc := range []struct {
		tail string
		kept bool
		by   cell.KilledBy
	}{
		{`..."error":null,"state_kept":true,"killed_by":null,"truncated":{}}}`, true, ""},
		{`"stdout":"\"state_kept\":true,\"killed_by\":\"oom\"","state_kept":false,"killed_by":"timeout","duration_ms":5}}`, false, cell.KilledByTimeout},
		{`..."state_kept":false,"killed_by":"bogus"}}`, false, ""},
		{`no keys at all`, false, ""},
	} {
		kept, by := tailState([]byte(tc.tail))
		if kept != tc.kept || by != tc.by {
			t.Errorf("tailState(%s) = %v, %q; want %v, %q", tc.tail, kept, by, tc.kept, tc.by)
		}
	}
}

// TestBudgetWaitsForRoom: a charge waits for a release rather than fail,
// and gives up after its wait.
func TestBudgetWaitsForRoom(t *testing.T) {
	b := NewBudget(MinBudget)
	ctx := context.Background()
	if err := b.acquire(ctx, b.Limit(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b.acquire(ctx, 1, 50*time.Millisecond); err != errBudgetBusy {
		t.Fatalf("acquire on a full budget = %v, want errBudgetBusy", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.release(b.Limit())
	}()
	if err := b.acquire(ctx, b.Limit(), 10*time.Second); err != nil {
		t.Fatalf("acquire after a release = %v", err)
	}
	if err := b.acquire(ctx, b.Limit()+1, time.Second); err == nil {
		t.Fatal("a charge past the whole budget was taken")
	}
}
