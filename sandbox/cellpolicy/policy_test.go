package cellpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// writeHook writes an executable shell script and returns its path.
func writeHook(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hook")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// setup wraps a fake manager holding one sandbox with the hook.
func setup(t *testing.T, hookBody string, timeout time.Duration, onRefuse func(context.Context, Refusal)) (*Manager, *sandboxtest.Manager, string) {
	t.Helper()
	inner := sandboxtest.New()
	info, err := inner.Create(context.Background(), sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(inner, Options{Hook: writeHook(t, hookBody), Timeout: timeout, OnRefuse: onRefuse})
	if err != nil {
		t.Fatal(err)
	}
	return m, inner, info.ID
}

// ranCells counts the cells the inner manager was asked to run.
func ranCells(inner *sandboxtest.Manager) []string {
	var out []string
	for _, c := range inner.Calls() {
		if strings.HasPrefix(c, "RunCell ") || strings.HasPrefix(c, "Exec ") {
			out = append(out, c)
		}
	}
	return out
}

const refuseOSSystem = `in=$(cat)
case "$in" in
*os.system*) echo "os.system is not allowed here" >&2; echo "second line" >&2; exit 1;;
esac
exit 0
`

func TestRefusesOSSystemAndRunsTheNextCell(t *testing.T) {
	var refusals []Refusal
	m, inner, id := setup(t, refuseOSSystem, 0, func(_ context.Context, r Refusal) { refusals = append(refusals, r) })
	ctx := context.Background()

	var events []cell.Event
	res, err := m.RunCell(ctx, id, sandbox.Cell{Code: "import os\nos.system('curl evil')", Timeout: time.Minute}, func(e cell.Event) { events = append(events, e) })
	if err != nil {
		t.Fatalf("refused cell: err %v, want a result", err)
	}
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != ErrorName {
		t.Fatalf("refused cell: %+v, want status error and %s", res, ErrorName)
	}
	if res.Error.Value != "os.system is not allowed here" {
		t.Errorf("reason %q, want the hook's first stderr line", res.Error.Value)
	}
	if !IsRefusedCell(res) {
		t.Error("IsRefusedCell is false for a refused cell")
	}
	if len(events) != 2 || events[0].Type != cell.EventError || events[1].Type != cell.EventEnd || events[1].End.Error.Name != ErrorName {
		t.Errorf("streamed %+v, want an error event and an end event", events)
	}
	if ran := ranCells(inner); len(ran) != 0 {
		t.Fatalf("the inner manager saw %v for a refused cell", ran)
	}
	if len(refusals) != 1 || refusals[0].Kind != KindCell || refusals[0].Sandbox != id || refusals[0].HookFailed {
		t.Errorf("OnRefuse got %+v", refusals)
	}

	res, err = m.RunCell(ctx, id, sandbox.Cell{Code: "x = 6\nx", Timeout: time.Minute}, nil)
	if err != nil || res.Status != cell.StatusOK || IsRefusedCell(res) {
		t.Fatalf("allowed cell: %+v, %v", res, err)
	}
	if ran := ranCells(inner); len(ran) != 1 || !strings.Contains(ran[0], "x = 6") {
		t.Errorf("the inner manager saw %v, want the allowed cell only", ran)
	}
	imitation := cell.Result{Status: cell.StatusError, ExecutionCount: 3, Error: &cell.Error{Name: ErrorName, Value: "from user code"}}
	if IsRefusedCell(imitation) {
		t.Error("IsRefusedCell matched a cell that ran and raised its own PolicyRefused")
	}
	if main := res.MainResult(); main == nil || main.Data[cell.MIMEText] != "6" {
		t.Errorf("allowed cell's value: %+v", res.Results)
	}
}

func TestRefusesExec(t *testing.T) {
	m, inner, id := setup(t, refuseOSSystem, 0, nil)
	req := sandbox.ExecRequest{Argv: []string{"python3", "-c", "import os; os.system('id')"}, Timeout: time.Minute}
	res, err := m.Exec(context.Background(), id, req)
	if err != nil {
		t.Fatal(err)
	}
	if !IsRefusedExec(res) || res.Stderr != "PolicyRefused: os.system is not allowed here\n" {
		t.Errorf("refused exec: %+v", res)
	}
	if ran := ranCells(inner); len(ran) != 0 {
		t.Fatalf("the inner manager saw %v", ran)
	}
	res, err = m.Exec(context.Background(), id, sandbox.ExecRequest{Argv: []string{"echo", "hi"}, Timeout: time.Minute})
	if err != nil || res.ExitCode != 0 || res.Stdout != "hi\n" {
		t.Errorf("allowed exec: %+v, %v", res, err)
	}
}

func TestHookGetsTheRequest(t *testing.T) {
	dir := t.TempDir()
	m, _, id := setup(t, `cat > "`+dir+`/in.$$"`+"\n", 0, nil)
	ctx := sandbox.WithCaller(context.Background(), sandbox.Caller{Tenant: "alpha", TokenID: "1a2b3c4d", Peer: "10.0.0.9:4000"})
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "print('\"quoted\"\\n')", Timeout: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"echo", "a b"}, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "in.*"))
	if len(files) != 2 {
		t.Fatalf("hook inputs: %v", files)
	}
	var got []map[string]any
	for _, f := range files {
		b, _ := os.ReadFile(f)
		if !strings.HasSuffix(string(b), "}\n") || strings.Count(string(b), "\n") != 1 {
			t.Errorf("hook input %q is not one line of JSON", b)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("hook input %q: %v", b, err)
		}
		got = append(got, v)
	}
	var sawCell, sawExec bool
	for _, v := range got {
		if v["tenant"] != "alpha" || v["sandbox"] != id || v["operator"] != false {
			t.Errorf("hook input %v: want tenant alpha, sandbox %s, operator false", v, id)
		}
		switch v["kind"] {
		case "cell":
			sawCell = v["code"] == "print('\"quoted\"\\n')" && v["language"] == "python"
		case "exec":
			argv, _ := v["argv"].([]any)
			sawExec = len(argv) == 2 && argv[0] == "echo" && argv[1] == "a b" && v["code"] == nil
		}
	}
	if !sawCell || !sawExec {
		t.Errorf("hook inputs %v: want the cell's code and the exec's argv", got)
	}
}

func TestHookPastItsDeadlineRefuses(t *testing.T) {
	// A child that holds the output pipes open too: the whole group goes.
	m, inner, id := setup(t, "(sleep 30; true) &\nsleep 30\n", 300*time.Millisecond, nil)
	start := time.Now()
	res, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("a hook with a 300ms deadline held the cell for %v", d)
	}
	if !IsRefusedCell(res) || !strings.Contains(res.Error.Value, "cell policy hook timed out after 300ms") {
		t.Errorf("result %+v, want PolicyRefused saying the hook timed out", res.Error)
	}
	if ran := ranCells(inner); len(ran) != 0 {
		t.Errorf("the inner manager saw %v", ran)
	}
	// The group was killed: no process of the hook's is left.
	if out := leftovers(m.hook.path); out != "" {
		t.Errorf("hook processes still running: %s", out)
	}
}

func TestCrashingHookRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"signal":     "echo dying >&2\nkill -SEGV $$\n",
		"no reason":  "exit 3\n",
		"bad binary": "", // replaced below by a file that is not a program
	} {
		t.Run(name, func(t *testing.T) {
			m, inner, id := setup(t, body, 0, nil)
			if name == "bad binary" {
				os.WriteFile(m.hook.path, []byte("\x7fELF garbage"), 0o755)
			}
			res, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !IsRefusedCell(res) {
				t.Fatalf("result %+v, want PolicyRefused", res)
			}
			want := map[string]string{"signal": "cell policy hook crashed (killed by segmentation fault); refused (fail closed): dying",
				"no reason":  "refused by the cell policy hook (exit status 3, no reason on its stderr)",
				"bad binary": "cell policy hook could not start"}[name]
			if !strings.HasPrefix(res.Error.Value, want) {
				t.Errorf("reason %q, want %q", res.Error.Value, want)
			}
			if ran := ranCells(inner); len(ran) != 0 {
				t.Errorf("the inner manager saw %v", ran)
			}
		})
	}
}

func TestReasonIsSanitisedAndClipped(t *testing.T) {
	m, _, id := setup(t, `printf '\n  \033[31mno\033[0m\tway\342\200\256 %0500d\n' 0 >&2; head -c 100000 /dev/zero; exit 1`+"\n", 0, nil)
	res, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := res.Error.Value
	if strings.ContainsAny(v, "\x1b\t\n\u202e") || !strings.HasPrefix(v, "[31mno[0m way ") || len(v) > MaxReason || !strings.HasSuffix(v, "...") {
		t.Errorf("reason %q (%d bytes): want control characters gone, clipped to %d", v, len(v), MaxReason)
	}
}

func TestErrorsBeforeTheHook(t *testing.T) {
	dir := t.TempDir()
	m, inner, id := setup(t, `touch "`+dir+`/ran"; exit 1`+"\n", 0, nil)
	ctx := context.Background()
	if _, err := m.RunCell(ctx, "sb-nosuch", sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
	if _, err := m.Exec(ctx, id, sandbox.ExecRequest{Timeout: time.Minute}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("empty argv: %v, want ErrInvalid", err)
	}
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: strings.Repeat("x", sandbox.MaxCodeBytes+1), Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrTooLarge) {
		t.Errorf("huge cell: %v, want ErrTooLarge", err)
	}
	inner.Lose(id, sandbox.LostInfo{Reason: "test"})
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("lost sandbox: %v, want ErrLost", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the hook ran for requests that were refused before it")
	}
}

func TestCancelledRequestEndsTheHook(t *testing.T) {
	m, inner, id := setup(t, "sleep 30\n", time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err %v, want the request's own deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if ran := ranCells(inner); len(ran) != 0 {
		t.Errorf("the inner manager saw %v", ran)
	}
}

func TestConcurrentHooksAreBounded(t *testing.T) {
	m, inner, id := setup(t, "exit 0\n", 300*time.Millisecond, nil)
	// Every slot taken, as by MaxConcurrent hooks still running.
	for i := 0; i < MaxConcurrent; i++ {
		m.hook.slots <- struct{}{}
	}
	res, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !IsRefusedCell(res) || !strings.Contains(res.Error.Value, "16 hooks were already running") {
		t.Errorf("with every slot taken: %+v, want a refusal saying so", res.Error)
	}
	<-m.hook.slots
	if res, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: "x = 1", Timeout: time.Minute}, nil); err != nil || res.Status != cell.StatusOK {
		t.Errorf("with a slot free: %+v, %v", res, err)
	}
	if ran := ranCells(inner); len(ran) != 1 {
		t.Errorf("the inner manager saw %v, want one cell", ran)
	}
}

// A hook that decides without reading its input (1 MiB of code) still
// allows: its closed stdin is not a failure.
func TestHookThatIgnoresItsInput(t *testing.T) {
	m, _, id := setup(t, "exit 0\n", 0, nil)
	res, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: "x = 1\n" + strings.Repeat("#", sandbox.MaxCodeBytes-7), Timeout: time.Minute}, nil)
	if err != nil || IsRefusedCell(res) {
		t.Errorf("%+v, %v", res.Error, err)
	}
}

func TestCheckHook(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644)
	for _, p := range []string{"", "relative/hook", filepath.Join(dir, "missing"), dir, plain} {
		if _, err := New(sandboxtest.New(), Options{Hook: p}); err == nil {
			t.Errorf("hook %q accepted", p)
		}
	}
}
