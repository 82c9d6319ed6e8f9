package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// runBash runs a Bash cell in the sandbox's default bash session.
func runBash(t *testing.T, m sandbox.Manager, id, code string, timeout time.Duration) cell.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+2*time.Minute)
	defer cancel()
	start := time.Now()
	r, err := m.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: cell.Bash}, Code: code, Timeout: timeout}, nil)
	if err != nil {
		t.Fatalf("bash cell %q: %v", code, err)
	}
	t.Logf("bash cell %.40q: %s in %v", code, r.Status, time.Since(start).Round(time.Millisecond))
	return r
}

// TestGuestBash runs Bash cells in a real guest (one sandbox): the shell
// keeps cd and exports, a failing command is an error, exit ends the cell
// and not the shell, a timeout interrupts a builtin loop with the state
// kept, a fork bomb stays within the sandbox's pids budget and the next
// cell answers, and the shell's variables are not Python's.
func TestGuestBash(t *testing.T) {
	m := newRigManager(t)
	info, err := m.Create(context.Background(), sandbox.Config{VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	check := func(r cell.Result, status cell.Status, stdout string) {
		t.Helper()
		if r.Status != status || (stdout != "" && r.Stdout != stdout) {
			t.Fatalf("got %+v (error %+v); want status %s, stdout %q", r, r.Error, status, stdout)
		}
	}

	check(runBash(t, m, id, "cd /tmp && export V=7; X=41; echo $BASH_VERSION >&2", time.Minute), cell.StatusOK, "")
	check(runBash(t, m, id, `echo $V; pwd; [ "$(id -u)" != 0 ] && echo notroot`, time.Minute), cell.StatusOK, "7\n/tmp\nnotroot\n")
	r := runBash(t, m, id, "echo err >&2; false", time.Minute)
	check(r, cell.StatusError, "")
	if r.Error == nil || r.Error.Value != "exit status 1" || r.Stderr != "err\n" {
		t.Fatalf("false: %+v", r)
	}
	r = runBash(t, m, id, "echo a; exit 3; echo no", time.Minute)
	check(r, cell.StatusError, "a\n")
	if !r.StateKept {
		t.Fatalf("exit: %+v", r)
	}
	r = runBash(t, m, id, "while :; do :; done", 2*time.Second)
	check(r, cell.StatusTimeout, "")
	if !r.StateKept {
		t.Fatalf("loop: %+v", r)
	}
	check(runBash(t, m, id, "sleep 100", 2*time.Second), cell.StatusTimeout, "")
	check(runBash(t, m, id, "echo $X", time.Minute), cell.StatusOK, "41\n")

	r = runBash(t, m, id, ":(){ :|:& };:; sleep 5", 5*time.Second)
	if r.Status == cell.StatusOK {
		t.Fatalf("fork bomb: %+v", r)
	}
	r = runBash(t, m, id, "unset -f :; echo alive", time.Minute)
	check(r, cell.StatusOK, "alive\n")

	// Python's session is another process: its x is not the shell's.
	if r := runCell(t, m, id, "x = 5\nx", time.Minute); r.Status != cell.StatusOK {
		t.Fatalf("python: %+v", r)
	}
	r = runBash(t, m, id, "echo ${x:-unset}", time.Minute)
	check(r, cell.StatusOK, "unset\n")
	if strings.Contains(r.Stderr, "cellvm:") {
		t.Fatalf("stderr %q", r.Stderr)
	}
}
