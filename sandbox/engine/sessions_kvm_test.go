package engine

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// runIn runs code in session s of sandbox id.
func runIn(t *testing.T, m sandbox.Manager, id string, s sandbox.Session, code string) cell.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := m.RunCell(ctx, id, sandbox.Cell{Session: s, Code: code, Timeout: 2 * time.Minute}, nil)
	if err != nil {
		t.Fatalf("%s/%s cell %q: %v", s.Language, s.Context, code, err)
	}
	return r
}

func valueIn(t *testing.T, m sandbox.Manager, id string, s sandbox.Session, code string) string {
	t.Helper()
	r := runIn(t, m, id, s, code)
	if r.MainResult() == nil {
		t.Fatalf("%s/%s cell %q: no value: %+v", s.Language, s.Context, code, r)
	}
	return r.MainResult().Data[cell.MIMEText]
}

// TestGuestSessions: one sandbox's sessions in the real guest (Python and
// Bash, which every image with cells has): a named Python context beside
// the default one, each with its own variables; a created context in its
// cwd; a restart of one that leaves the other; a delete; the list; and a
// fork that carries every session (the guest's registry and each
// session's variables), reseeded without a hitch.
func TestGuestSessions(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	py, pyA, pyB := sandbox.Session{}, sandbox.Session{Context: "a"}, sandbox.Session{Context: "b"}
	sh := sandbox.Session{Language: cell.Bash}
	runIn(t, m, sb.ID, py, "x = 1")
	runIn(t, m, sb.ID, pyA, "x = 2")
	if r := runIn(t, m, sb.ID, sh, "cd /tmp && export V=7"); r.Status != cell.StatusOK {
		t.Fatalf("bash: %+v", r)
	}
	if got := valueIn(t, m, sb.ID, py, "x"); got != "1" {
		t.Fatalf("python's default x = %s beside context a's", got)
	}
	info, err := m.CreateContext(ctx, sb.ID, sandbox.ContextSpec{Language: cell.Python, Name: "b", Cwd: "/tmp"})
	if err != nil || info.Name != "b" || info.Language != cell.Python {
		t.Fatalf("CreateContext = %+v, %v", info, err)
	}
	if got := valueIn(t, m, sb.ID, pyB, "import os; os.getcwd()"); got != "'/tmp'" {
		t.Fatalf("context b's cwd is %s", got)
	}
	if err := m.Restart(ctx, sb.ID, pyB); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteContext(ctx, sb.ID, pyB); err != nil {
		t.Fatal(err)
	}
	cs, err := m.Contexts(ctx, sb.ID)
	var names []string
	for _, c := range cs {
		names = append(names, string(c.Language)+"/"+c.Name)
	}
	sort.Strings(names)
	if err != nil || strings.Join(names, " ") != "bash/default python/a python/default" {
		t.Fatalf("Contexts = %v, %v", names, err)
	}

	snap, err := m.Snapshot(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if r := runIn(t, m, fork.ID, sh, "echo $V; pwd"); r.Stdout != "7\n/tmp\n" {
		t.Errorf("the fork's bash: %+v", r)
	}
	if got := valueIn(t, m, fork.ID, pyA, "x"); got != "2" {
		t.Errorf("the fork's context a: x = %s", got)
	}
	if err := m.Restart(ctx, fork.ID, pyA); err != nil {
		t.Fatal(err)
	}
	if r := runIn(t, m, fork.ID, pyA, "x"); r.Error == nil || r.Error.Name != "NameError" {
		t.Errorf("context a keeps x after its restart: %+v", r)
	}
	if got := valueIn(t, m, fork.ID, py, "x"); got != "1" {
		t.Errorf("the fork's default: x = %s after a's restart", got)
	}
}
