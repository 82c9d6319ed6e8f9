package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestLanguages is issue 27's proof on a real guest through the API:
// JavaScript, TypeScript and Bash cells keep the notebook contract (state,
// streams, the last value, errors, a timeout that keeps state), each
// language's session is its own, an unknown language is refused naming
// those there are, and a fork bomb and a memory bomb give results after
// which the sandbox answers. TestLanguagesFork shows a fork's sessions.
func TestLanguages(t *testing.T) {
	ctx, c, id := daemonSandbox(t, 15*time.Minute)

	run := func(t *testing.T, id string, lang cell.Language, code string, timeout time.Duration) cell.Result {
		t.Helper()
		r, err := c.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: lang}, Code: code, Timeout: timeout}, nil)
		if err != nil {
			t.Fatalf("%s cell %q: %v", lang, code, err)
		}
		return r
	}
	text := func(r cell.Result) string {
		if m := r.MainResult(); m != nil {
			return m.Data["text/plain"]
		}
		return ""
	}
	// want checks a cell's status and its last value.
	want := func(t *testing.T, r cell.Result, status cell.Status, value string) {
		t.Helper()
		if r.Status != status || text(r) != value {
			t.Fatalf("got status %s, value %q, want %s, %q: %+v", r.Status, text(r), status, value, r)
		}
	}

	t.Run("javascript", func(t *testing.T) {
		// The first cell starts Node in a guest of a nested rig: minutes.
		want(t, run(t, id, cell.JavaScript, "let x = 41", 3*time.Minute), cell.StatusOK, "")
		want(t, run(t, id, cell.JavaScript, "x + 1", time.Minute), cell.StatusOK, "42")
		r := run(t, id, cell.JavaScript, "console.log('to stdout'); console.error('to stderr')", time.Minute)
		if r.Status != cell.StatusOK || r.Stdout != "to stdout\n" || r.Stderr != "to stderr\n" {
			t.Fatalf("console: %+v", r)
		}
		want(t, run(t, id, cell.JavaScript, "await new Promise(r => setTimeout(() => r(x + 2), 20))", time.Minute), cell.StatusOK, "43")
		r = run(t, id, cell.JavaScript, "throw new TypeError('boom')", time.Minute)
		if r.Status != cell.StatusError || r.Error == nil || r.Error.Name != "TypeError" || r.Error.Value != "boom" {
			t.Fatalf("throw: %+v", r)
		}
		want(t, run(t, id, cell.JavaScript, "({a: 1, b: [1, 2], s: 'x'})", time.Minute), cell.StatusOK, "{ a: 1, b: [ 1, 2 ], s: 'x' }")

		r = run(t, id, cell.JavaScript, "while (true) {}", 3*time.Second)
		if r.Status != cell.StatusTimeout || r.KilledBy != cell.KilledByTimeout {
			t.Fatalf("endless loop: %+v", r)
		}
		after := run(t, id, cell.JavaScript, "typeof x === 'undefined' ? 'gone' : x", time.Minute)
		switch {
		case r.StateKept && text(after) != "41":
			t.Fatalf("state_kept true after the timeout, but x is %q: %+v", text(after), after)
		case !r.StateKept && text(after) != "'gone'":
			t.Fatalf("state_kept false after the timeout, but x is %q", text(after))
		case !r.StateKept:
			t.Logf("the endless loop cost the session (said so: state_kept false)")
		}
	})
	t.Run("typescript", func(t *testing.T) {
		r := run(t, id, cell.TypeScript, "function twice(n: number): number { return n * 2 }\ntwice(21)", 3*time.Minute)
		want(t, r, cell.StatusOK, "42")
	})
	t.Run("bash", func(t *testing.T) {
		want(t, run(t, id, cell.Bash, "cd /tmp && export V=7", 2*time.Minute), cell.StatusOK, "")
		r := run(t, id, cell.Bash, "echo $V; pwd", time.Minute)
		if r.Status != cell.StatusOK || r.Stdout != "7\n/tmp\n" {
			t.Fatalf("state across bash cells: %+v", r)
		}
		r = run(t, id, cell.Bash, "echo out; echo err >&2; false", time.Minute)
		if r.Status != cell.StatusError || r.Error == nil || !strings.Contains(r.Error.Value, "1") || r.Stdout != "out\n" || r.Stderr != "err\n" {
			t.Fatalf("false: %+v", r)
		}
	})
	t.Run("separation", func(t *testing.T) {
		want(t, run(t, id, cell.Python, "sep = 'py'", 2*time.Minute), cell.StatusOK, "")
		want(t, run(t, id, cell.JavaScript, "var sep = 'js'", time.Minute), cell.StatusOK, "")
		want(t, run(t, id, cell.Bash, "sep=sh", time.Minute), cell.StatusOK, "")
		want(t, run(t, id, cell.Python, "sep", time.Minute), cell.StatusOK, "'py'")
		want(t, run(t, id, cell.JavaScript, "sep", time.Minute), cell.StatusOK, "'js'")
		if r := run(t, id, cell.Bash, "echo $sep", time.Minute); r.Stdout != "sh\n" {
			t.Fatalf("bash's sep: %+v", r)
		}
		_, err := c.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: "cobol"}, Code: "DISPLAY 'HI'", Timeout: time.Minute}, nil)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(err.Error(), "javascript") || !strings.Contains(err.Error(), "bash") {
			t.Fatalf("cobol: %v, want a 400 naming the languages", err)
		}
	})
	t.Run("walls", func(t *testing.T) {
		r := run(t, id, cell.Bash, ":(){ :|:& };:", 20*time.Second)
		t.Logf("fork bomb: status %s, killed_by %q, state_kept %v", r.Status, r.KilledBy, r.StateKept)
		r = run(t, id, cell.Bash, "echo alive", 2*time.Minute)
		if r.Status != cell.StatusOK || r.Stdout != "alive\n" {
			t.Fatalf("after the fork bomb: %+v", r)
		}
		// The classic bomb backgrounds itself, so its cell ends at once
		// and the bomb goes on holding the cells' pids budget (no other
		// session could start a thread). Restarting the Bash session
		// kills everything in its cgroup, the bomb included.
		if err := c.Restart(ctx, id, sandbox.Session{Language: cell.Bash}); err != nil {
			t.Fatalf("restart bash after the fork bomb: %v", err)
		}
		r = run(t, id, cell.JavaScript, "const hog = []; while (true) hog.push(new Array(1 << 20).fill(1.5))", 3*time.Minute)
		if r.Status == cell.StatusOK {
			t.Fatalf("memory bomb ended ok: %+v", r)
		}
		t.Logf("memory bomb: status %s, killed_by %q, state_kept %v, error %+v", r.Status, r.KilledBy, r.StateKept, r.Error)
		want(t, run(t, id, cell.JavaScript, "6 * 7", 3*time.Minute), cell.StatusOK, "42")
	})
}

// TestLanguagesFork: a fork of a sandbox whose JavaScript and Python
// sessions hold variables has them. (Split from TestLanguages, whose
// sandbox has survived a fork bomb and a memory bomb by then: its snapshot
// there ended with the VMM's control socket closing, a failure still to
// be found; extended tier.)
func TestLanguagesFork(t *testing.T) {
	ctx, c, id := daemonSandbox(t, 10*time.Minute)
	want := func(id string, lang cell.Language, code, value string) {
		t.Helper()
		r, err := c.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: lang}, Code: code, Timeout: 3 * time.Minute}, nil)
		if err != nil {
			t.Fatalf("%s cell %q: %v", lang, code, err)
		}
		if m := r.MainResult(); r.Status != cell.StatusOK || m == nil || m.Data["text/plain"] != value {
			t.Fatalf("%s cell %q: %+v, want %q", lang, code, r, value)
		}
	}
	want(id, cell.Python, "sep = 'py'; sep", "'py'")
	want(id, cell.JavaScript, "globalThis.forked = 'from the parent'; forked", "'from the parent'")
	snap, err := c.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := c.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete(context.Background(), fork.ID)
	want(fork.ID, cell.JavaScript, "forked", "'from the parent'")
	want(fork.ID, cell.Python, "sep", "'py'")
}

// daemonSandbox starts a daemon and one sandbox in it, both ended when t
// is, and a context that ends after limit.
func daemonSandbox(t *testing.T, limit time.Duration) (context.Context, *api.Client, string) {
	t.Helper()
	kvmtest.Require(t)
	d := startDaemon(t, t.TempDir())
	t.Cleanup(func() { d.stop(t) })
	c := api.NewClient(d.socket)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	info, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Delete(context.Background(), info.ID) })
	return ctx, c, info.ID
}
