package sandboxtest_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

var ctx = context.Background()

func create(t *testing.T, m *sandboxtest.Manager, cfg sandbox.Config) string {
	t.Helper()
	info, err := m.Create(ctx, cfg)
	if err != nil {
		t.Fatalf("Create(%+v): %v", cfg, err)
	}
	return info.ID
}

// run runs code and returns its result and the types of its events.
func run(t *testing.T, m *sandboxtest.Manager, id, code string) (cell.Result, []string) {
	t.Helper()
	var events []string
	res, err := m.RunCell(ctx, id, sandbox.Cell{Code: code, Timeout: time.Minute}, func(ev cell.Event) { events = append(events, string(ev.Type)) })
	if err != nil {
		t.Fatalf("RunCell(%q): %v", code, err)
	}
	if len(events) == 0 || events[len(events)-1] != string(cell.EventEnd) {
		t.Errorf("RunCell(%q): events %v do not end with the end event", code, events)
	}
	return res, events
}

// TestInterpreterStatePerSandbox: variables persist across cells of one
// sandbox, not into another, and not across a restart.
func TestInterpreterStatePerSandbox(t *testing.T) {
	m := sandboxtest.New()
	a, b := create(t, m, sandbox.Config{}), create(t, m, sandbox.Config{})
	run(t, m, a, "import os\n# a comment\nx = 41")
	if res, ev := run(t, m, a, "print(x)"); res.Stdout != "41\n" || !slices.Equal(ev, []string{"stdout", "end"}) || res.ExecutionCount != 2 {
		t.Errorf("print(x): %+v, events %v", res, ev)
	}
	if res, _ := run(t, m, a, "x"); res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != "41" {
		t.Errorf("x: %+v", res)
	}
	res, ev := run(t, m, b, "print(x)")
	if res.Status != cell.StatusError || res.Error.Name != "NameError" || res.Error.Value != "name 'x' is not defined" || !slices.Contains(ev, "error") {
		t.Errorf("x in another sandbox: %+v, events %v", res, ev)
	}
	if err := m.Restart(ctx, a, sandbox.Session{}); err != nil {
		t.Fatal(err)
	}
	if res, _ := run(t, m, a, "x"); res.Status != cell.StatusError {
		t.Errorf("x after a restart: %+v", res)
	}
}

// TestOneCellAtATime: while the gate cell runs, a second cell, a pause
// and a snapshot are busy and Get says a cell runs; Interrupt opens it.
func TestOneCellAtATime(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{})
	waiting := make(chan struct{})
	done := make(chan cell.Result)
	go func() {
		res, _ := m.RunCell(ctx, id, sandbox.Cell{Code: "gate", Timeout: time.Minute}, func(ev cell.Event) {
			if ev.Text == "waiting\n" {
				close(waiting)
			}
		})

		done <- res
	}()
	<-waiting
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("a second cell: %v, want ErrBusy", err)
	}
	if err := m.Pause(ctx, id); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("pause: %v, want ErrBusy", err)
	}
	if _, err := m.Snapshot(ctx, id); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("snapshot: %v, want ErrBusy", err)
	}
	if info, _ := m.Get(ctx, id); !info.CellRunning {
		t.Error("Get does not say a cell runs")
	}
	if err := m.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	if res := <-done; res.Status != cell.StatusOK || res.Stdout != "waiting\nreleased\n" {
		t.Errorf("gate: %+v", res)
	}
	if info, _ := m.Get(ctx, id); info.CellRunning {
		t.Error("Get says a cell runs after it ended")
	}
}

// TestScriptComesFirst: a Script's result is streamed for it when it
// emitted nothing, its own events are not doubled, Pass leaves the cell to
// the built-in ones, and an error is no cell at all.
func TestScriptComesFirst(t *testing.T) {
	m := sandboxtest.New()
	m.Script = func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		switch c.Code {
		case "whole":
			return cell.Result{Status: cell.StatusError, Stdout: "o", Stderr: "e",
				Results: []cell.Display{{Data: map[string]string{cell.MIMEText: "d"}}}, Error: &cell.Error{Name: "E"}}, nil
		case "stream": // overrides the built-in one
			c.Emit(cell.Event{Type: cell.EventStdout, Text: "mine\n"})
			return cell.Result{Status: cell.StatusOK, Stdout: "mine\n"}, nil
		case "refuse":
			return cell.Result{}, sandbox.ErrLost
		}
		return cell.Result{}, sandboxtest.Pass
	}
	id := create(t, m, sandbox.Config{})
	if _, ev := run(t, m, id, "whole"); !slices.Equal(ev, []string{"stdout", "stderr", "result", "error", "end"}) {
		t.Errorf("a result streamed for its script: events %v", ev)
	}
	if res, ev := run(t, m, id, "stream"); res.Stdout != "mine\n" || !slices.Equal(ev, []string{"stdout", "end"}) {
		t.Errorf("the script's own stream: %+v, events %v", res, ev)
	}
	if res, _ := run(t, m, id, "timeout_ms"); res.Stdout != "60000\n" {
		t.Errorf("a cell passed to the built-in ones: %+v", res)
	}
	var events int
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "refuse", Timeout: time.Minute}, func(cell.Event) { events++ }); !errors.Is(err, sandbox.ErrLost) || events != 0 {
		t.Errorf("a script's error: %v after %d events, want ErrLost and none", err, events)
	}
}

// TestScriptedCells: the built-in cells the package doc lists.
func TestScriptedCells(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{Env: map[string]string{"A": "1"}})
	if res, ev := run(t, m, id, "stream"); res.Stdout != "out 1\nout 2\n" || res.Stderr != "err 1\n" ||
		!slices.Equal(ev, []string{"stdout", "stderr", "stdout", "result", "end"}) {
		t.Errorf("stream: %+v, events %v", res, ev)
	}
	if res, ev := run(t, m, id, "raise"); res.Status != cell.StatusError || res.Error.Name != "KeyError" || !slices.Contains(ev, "error") {
		t.Errorf("raise: %+v, events %v", res, ev)
	}
	if res, _ := run(t, m, id, "timeout"); res.Status != cell.StatusTimeout || !res.StateKept || res.KilledBy != cell.KilledByTimeout {
		t.Errorf("timeout: %+v", res)
	}
	if res, _ := run(t, m, id, "chart"); len(res.Results) != 2 || !strings.HasPrefix(res.Results[0].Data[cell.MIMEPNG], "iVBORw0KGgo") {
		t.Errorf("chart: %+v", res)
	}
	if res, _ := run(t, m, id, "env"); res.Stdout != `{"A":"1"}`+"\n" {
		t.Errorf("env: %q", res.Stdout)
	}
	if res, _ := run(t, m, id, "big"); len(res.Stdout) != 1<<20 {
		t.Errorf("big: %d bytes", len(res.Stdout))
	}
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "internal", Timeout: time.Minute}, nil); err == nil || errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("internal: %v, want a plain error", err)
	}
	hctx, cancel := context.WithCancel(ctx)
	go func() { time.Sleep(10 * time.Millisecond); cancel() }()
	if _, err := m.RunCell(hctx, id, sandbox.Cell{Code: "hang", Timeout: time.Minute}, nil); err != nil || !slices.Contains(m.Happened(), "hang "+id+": the client went away") {
		t.Errorf("hang: %v, happened %v", err, m.Happened())
	}
	if res, _ := run(t, m, id, "die"); res.Status != cell.StatusLost || res.StateKept {
		t.Errorf("die: %+v", res)
	}
	if info, _ := m.Get(ctx, id); info.State != sandbox.StateLost || info.Lost == nil || info.Lost.KilledBy != "signal" {
		t.Errorf("after die: %+v", info)
	}
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("a cell on a lost sandbox: %v, want ErrLost", err)
	}
}

// TestCommands: the built-in commands.
func TestCommands(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{})
	for _, c := range []struct {
		argv     []string
		stdin    string
		exit     int
		out, err string
	}{
		{[]string{"echo", "a", "b"}, "", 0, "a b\n", ""},
		{[]string{"cat"}, "in", 0, "in", ""},
		{[]string{"hex"}, "\x00\xff", 0, "00ff", ""},
		{[]string{"argv", "x"}, "", 3, `["argv","x"]`, "to stderr\n"},
		{[]string{"nope", "x"}, "", 127, `["nope","x"]`, "nope: not found\n"},
	} {
		res, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: c.argv, Stdin: []byte(c.stdin), Timeout: time.Second})
		if err != nil || res.ExitCode != c.exit || res.Stdout != c.out || res.Stderr != c.err {
			t.Errorf("%v: %+v, %v", c.argv, res, err)
		}
	}
	res, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"sleep", "9"}, Timeout: 1500 * time.Millisecond})
	if err != nil || !res.TimedOut || res.DurationMS != 1500 {
		t.Errorf("sleep: %+v, %v", res, err)
	}
	if _, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"echo"}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("no timeout: %v, want ErrInvalid", err)
	}
}
