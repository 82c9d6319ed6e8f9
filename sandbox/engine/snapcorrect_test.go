package engine

import (
	"context"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestResumeKeepsTheUsersGenerators: a resume of a sandbox's own pause
// renews its kernel's pool and clock only, so a user's seeded generator
// carries on its sequence; a fork of it renews the generators too, so it
// does not repeat its parent's numbers.
func TestResumeKeepsTheUsersGenerators(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := cellText(t, m, info.ID, "reseeds"); got != "1" {
		t.Errorf("the resumed guest's kernel was reseeded %s times, want 1", got)
	}
	if got := cellText(t, m, info.ID, "genreseeds"); got != "0" {
		t.Errorf("a resume reseeded the user's generators %s times, want 0", got)
	}
	snap, err := m.Snapshot(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, snap.ID)
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, fork.ID)
	if got := cellText(t, m, fork.ID, "genreseeds"); got != "1" {
		t.Errorf("a fork's generators were reseeded %s times, want 1", got)
	}
}
