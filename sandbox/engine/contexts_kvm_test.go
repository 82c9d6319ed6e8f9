package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// TestContextsOnARealGuest: named contexts on one real guest, through the
// engine and the guest's agent: a Python context with its own cwd and
// variables beside the default session, listed; its restart leaves the
// default's variables; a fork has it with its variables; deleting it
// ends it (a second delete is not found).
func TestContextsOnARealGuest(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	work := sandbox.Session{Language: cell.Python, Context: "work"}
	text := func(id string, s sandbox.Session, code string) string {
		t.Helper()
		r, err := m.RunCell(ctx, id, sandbox.Cell{Session: s, Code: code, Timeout: time.Minute}, nil)
		if err != nil {
			t.Fatalf("cell %q in %s: %v", code, s, err)
		}
		if r.MainResult() == nil {
			return string(r.Status) + ": " + r.Stderr
		}
		return r.MainResult().Data[cell.MIMEText]
	}
	text(id, sandbox.Session{}, "x = 1")
	ci, err := m.CreateContext(ctx, id, sandbox.ContextSpec{Language: cell.Python, Name: "work", Cwd: "/tmp"})
	if err != nil || ci.Name != "work" || ci.Language != cell.Python {
		t.Fatalf("CreateContext = %+v, %v", ci, err)
	}
	if got := text(id, work, "import os\nx = 2\nos.getcwd()"); got != "'/tmp'" {
		t.Errorf("the context's cwd: %s, want '/tmp'", got)
	}
	if got := text(id, sandbox.Session{}, "x"); got != "1" {
		t.Errorf("the default session's x = %s, want 1", got)
	}
	cs, err := m.Contexts(ctx, id)
	found := false
	for _, c := range cs {
		found = found || c.Name == "work" && c.Cwd == "/tmp" && c.Running
	}
	if err != nil || !found {
		t.Errorf("Contexts = %+v, %v; want work in /tmp, running", cs, err)
	}
	snap, err := m.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := text(fork.ID, work, "x"); got != "2" {
		t.Errorf("the fork's context x = %s, want 2", got)
	}
	if err := m.Restart(ctx, id, work); err != nil {
		t.Fatal(err)
	}
	if got := text(id, sandbox.Session{}, "x"); got != "1" {
		t.Errorf("the default's x after the context's restart = %s, want 1", got)
	}
	if err := m.DeleteContext(ctx, id, work); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteContext(ctx, id, work); !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a second delete: %v, want not found", err)
	}
}
