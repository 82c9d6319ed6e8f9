package agentclient

import (
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/interp"
)

// realInterpOrExecOnly returns a real supervisor; Exec needs no python, so
// it is created with a python path that is only used by cells.
func realInterpOrExecOnly(t *testing.T) *interp.Interp {
	in, err := interp.New(interp.Config{Python: interp.DefaultPython, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return in
}

func TestRunCellRealInterpreter(t *testing.T) {
	in := realInterp(t)
	c := serve(t, agent.Config{Interp: in})
	ctx := ctxT(t)
	var events []cell.Event
	res, err := c.RunCell(ctx, "import numpy as np\nx = np.arange(5)\nprint(int(x.sum()))\nx * 2", 30*time.Second, func(e cell.Event) { events = append(events, e) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != cell.StatusOK || res.Stdout != "10\n" || res.MainResult() == nil || !strings.Contains(res.MainResult().Data[cell.MIMEText], "array([0, 2, 4, 6, 8])") {
		t.Fatalf("result %+v", res)
	}
	if len(events) == 0 || events[len(events)-1].Type != cell.EventEnd {
		t.Fatalf("events %+v", events)
	}
	// State persists.
	res, err = c.RunCell(ctx, "x.max()", 0, nil)
	if err != nil || res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != "np.int64(4)" && res.MainResult().Data[cell.MIMEText] != "4" {
		t.Fatalf("second cell: %+v %v", res, err)
	}
	// Errors are results.
	res, err = c.RunCell(ctx, "{}['k']", 0, nil)
	if err != nil || res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "KeyError" {
		t.Fatalf("error cell: %+v %v", res, err)
	}
}

func TestInterruptRealInterpreter(t *testing.T) {
	in := realInterp(t)
	c := serve(t, agent.Config{Interp: in})
	ctx := ctxT(t)
	if _, err := c.RunCell(ctx, "kept = 7", 0, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan cell.Result)
	go func() {
		res, err := c.RunCell(ctx, "import time\nwhile True:\n    time.sleep(0.01)", 0, nil)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, err := c.Interrupt(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cell never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := <-done
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept {
		t.Fatalf("interrupted cell: %+v", res)
	}
	res, err := c.RunCell(ctx, "kept", 0, nil)
	if err != nil || res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != "7" {
		t.Fatalf("state after interrupt: %+v %v", res, err)
	}
}
