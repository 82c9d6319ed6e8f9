package sandboxtest_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// runIn runs code in session s and returns its result.
func runIn(t *testing.T, m *sandboxtest.Manager, id string, s sandbox.Session, code string) cell.Result {
	t.Helper()
	res, err := m.RunCell(ctx, id, sandbox.Cell{Session: s, Code: code, Timeout: time.Second}, nil)
	if err != nil {
		t.Fatalf("cell %q in %+v: %v", code, s, err)
	}
	return res
}

func mainText(r cell.Result) string {
	if d := r.MainResult(); d != nil {
		return d.Data[cell.MIMEText]
	}
	return ""
}

// TestSessionsAreSeparate: Python's x and JavaScript's x are separate;
// TypeScript shares JavaScript's session; a named context has its own;
// a restart clears one session only; a fork has its snapshot's sessions;
// the calls record each cell's session.
func TestSessionsAreSeparate(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{})
	js := sandbox.Session{Language: "js"}
	runIn(t, m, id, sandbox.Session{}, "x = 1")
	runIn(t, m, id, js, "let x = 41;")
	runIn(t, m, id, sandbox.Session{Language: cell.JavaScript, Context: "w"}, "const x = 7")
	runIn(t, m, id, sandbox.Session{Language: cell.Bash}, "export V=7")
	if got := mainText(runIn(t, m, id, sandbox.Session{}, "x")); got != "1" {
		t.Errorf("python x = %q, want 1", got)
	}
	if got := mainText(runIn(t, m, id, sandbox.Session{Language: cell.TypeScript}, "x")); got != "41" {
		t.Errorf("typescript (javascript's session) x = %q, want 41", got)
	}
	if got := runIn(t, m, id, js, "console.log(x)").Stdout; got != "41\n" {
		t.Errorf("console.log(x) = %q", got)
	}
	if got := runIn(t, m, id, sandbox.Session{Language: "sh"}, "echo $V").Stdout; got != "7\n" {
		t.Errorf("echo $V = %q", got)
	}
	if r := runIn(t, m, id, sandbox.Session{Language: cell.Bash}, "x"); r.Status != cell.StatusError {
		t.Errorf("bash has python's x: %+v", r)
	}
	snap, err := m.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(ctx, id, js); err != nil {
		t.Fatal(err)
	}
	if r := runIn(t, m, id, js, "x"); r.Status != cell.StatusError {
		t.Errorf("javascript's x after its restart: %+v", r)
	}
	if got := mainText(runIn(t, m, id, sandbox.Session{}, "x")); got != "1" {
		t.Errorf("python's x after javascript's restart = %q, want 1", got)
	}
	if got := mainText(runIn(t, m, id, sandbox.Session{Language: cell.JavaScript, Context: "w"}, "x")); got != "7" {
		t.Errorf("context w's x after the default's restart = %q, want 7", got)
	}
	fork := create(t, m, sandbox.Config{Snapshot: snap.ID})
	if got := mainText(runIn(t, m, fork, js, "x")); got != "41" {
		t.Errorf("the fork's javascript x = %q, want 41", got)
	}
	calls := m.Calls()
	for _, want := range []string{`RunCell ` + id + ` "x = 1"`, `RunCell ` + id + ` "let x = 41;" javascript/default`,
		`RunCell ` + id + ` "const x = 7" javascript/w`, `RunCell ` + id + ` "x" typescript/default`, `Restart ` + id + ` javascript/default`} {
		if !slices.Contains(calls, want) {
			t.Errorf("calls lack %s: %q", want, calls)
		}
	}
}

// TestSessionRefusals: an unknown language, a bad context name, a
// language the image lacks (naming those it has), restarting a context
// that does not exist.
func TestSessionRefusals(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{Image: "scratch"})
	for _, s := range []sandbox.Session{{Language: "cobol"}, {Context: "../x"}, {Language: "ts"}} {
		_, err := m.RunCell(ctx, id, sandbox.Cell{Session: s, Code: "1", Timeout: time.Second}, nil)
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("cell in %+v: %v, want ErrInvalid", s, err)
		}
	}
	_, err := m.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: "js"}, Code: "1", Timeout: time.Second}, nil)
	if err == nil || !strings.Contains(err.Error(), `image "scratch" has no javascript; its languages are python, bash`) {
		t.Errorf("a javascript cell on scratch: %v", err)
	}
	if err := m.Restart(ctx, id, sandbox.Session{Language: cell.Bash, Context: "nope"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("restart of a context that does not exist: %v, want ErrNotFound", err)
	}
	if err := m.Restart(ctx, id, sandbox.Session{Language: cell.Bash}); err != nil {
		t.Errorf("restart of bash's default session: %v", err)
	}
}

// TestContexts: create (with a cwd, a made-up name), list (default
// sessions once used), a name in use, the limit, delete.
func TestContexts(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{})
	if cs, err := m.Contexts(ctx, id); err != nil || len(cs) != 0 {
		t.Fatalf("Contexts of a fresh sandbox = %+v, %v", cs, err)
	}
	ci, err := m.CreateContext(ctx, id, sandbox.ContextSpec{Language: "ts", Name: "work", Cwd: "/home/user/"})
	if err != nil || ci != (sandbox.ContextInfo{Language: cell.JavaScript, Name: "work", Cwd: "/home/user"}) {
		t.Fatalf("CreateContext = %+v, %v", ci, err)
	}
	made, err := m.CreateContext(ctx, id, sandbox.ContextSpec{})
	if err != nil || made.Language != cell.Python || !cell.ValidContextName(made.Name) {
		t.Fatalf("CreateContext with no name = %+v, %v", made, err)
	}
	if _, err := m.CreateContext(ctx, id, sandbox.ContextSpec{Language: "js", Name: "work"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a name in use: %v, want ErrInvalid", err)
	}
	runIn(t, m, id, sandbox.Session{}, "x = 1")
	runIn(t, m, id, sandbox.Session{Language: cell.JavaScript, Context: "work"}, "x = 2")
	cs, err := m.Contexts(ctx, id)
	want := []sandbox.ContextInfo{{Language: cell.Python, Name: "default", Running: true}, {Language: cell.Python, Name: made.Name},
		{Language: cell.JavaScript, Name: "work", Cwd: "/home/user", Running: true}}
	if err != nil || !slices.Equal(cs, want) {
		t.Errorf("Contexts = %+v, %v; want %+v", cs, err, want)
	}
	for i := len(cs); i < cell.MaxContexts; i++ {
		if _, err := m.CreateContext(ctx, id, sandbox.ContextSpec{Language: cell.Bash}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.CreateContext(ctx, id, sandbox.ContextSpec{Language: cell.Bash}); !errors.Is(err, sandbox.ErrQuota) {
		t.Errorf("context %d: %v, want ErrQuota", cell.MaxContexts+1, err)
	}
	if _, err := m.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: cell.Bash}, Code: "1", Timeout: time.Second}, nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a cell starting session %d: %v, want ErrInvalid", cell.MaxContexts+1, err)
	}
	if err := m.DeleteContext(ctx, id, sandbox.Session{Language: "js", Context: "work"}); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteContext(ctx, id, sandbox.Session{Language: "js", Context: "work"}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("deleting it again: %v, want ErrNotFound", err)
	}
	if err := m.DeleteContext(ctx, id, sandbox.Session{}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("deleting python's default session: %v, want ErrInvalid", err)
	}
	if r, err := m.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: "js", Context: "work"}, Code: "x", Timeout: time.Second}, nil); err != nil || r.Status != cell.StatusError {
		t.Errorf("a cell in the deleted context's name starts afresh: %+v, %v", r, err)
	}
	if _, err := m.Contexts(ctx, "sb-nosuch"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Contexts of no sandbox: %v", err)
	}
}
