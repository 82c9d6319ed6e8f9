package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestSetTTLExtendsFromNow: a sandbox with a 2 s TTL given 1 h more from
// now is still there after its first TTL, shows the new total, and keeps
// it (and its labels) when a new daemon takes it back; a fork of it has
// only the labels its own create gave.
func TestSetTTLExtendsFromNow(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	labels := map[string]string{"run": "42", "user": "alice"}
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, TTL: 2 * time.Second, Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.SetTTL(ctx, info.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.TTL < time.Hour || got.Config.TTL > time.Hour+5*time.Second || got.Config.TTL%time.Second != 0 {
		t.Errorf("TTL after SetTTL(1h): %v, want 1 h plus the sandbox's age in whole seconds", got.Config.TTL)
	}
	time.Sleep(3500 * time.Millisecond) // the reaper ticks each second
	if _, err := m.Get(ctx, info.ID); err != nil {
		t.Fatalf("the sandbox is gone after its first TTL though SetTTL gave it 1 h: %v", err)
	}

	snap, err := m.Snapshot(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(fork.Config.Labels) != 0 {
		t.Errorf("a fork created without labels has its parent's: %v", fork.Config.Labels)
	}
	own, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID, Labels: map[string]string{"fork": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(own.Config.Labels) != 1 || own.Config.Labels["fork"] != "yes" {
		t.Errorf("a fork created with labels fork=yes has %v", own.Config.Labels)
	}

	abandon(m)
	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	back, err := m2.Get(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if back.Config.TTL != got.Config.TTL {
		t.Errorf("TTL taken back: %v, want %v", back.Config.TTL, got.Config.TTL)
	}
	if len(back.Config.Labels) != 2 || back.Config.Labels["run"] != "42" || back.Config.Labels["user"] != "alice" {
		t.Errorf("labels taken back: %v, want %v", back.Config.Labels, labels)
	}
}

// TestSetTTLRefusesBadInput: a TTL under a second or past the cap is
// ErrInvalid and changes nothing; an unknown sandbox is ErrNotFound.
func TestSetTTLRefusesBadInput(t *testing.T) {
	m, _ := newPausableManager(t, withServeLifetimes(2*time.Hour))
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, ttl := range []time.Duration{0, -time.Second, 500 * time.Millisecond, 2*time.Hour + time.Second} {
		if _, err := m.SetTTL(ctx, info.ID, ttl); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("SetTTL(%v): %v, want ErrInvalid", ttl, err)
		}
	}
	if got, _ := m.Get(ctx, info.ID); got.Config.TTL != time.Minute {
		t.Errorf("TTL after refused SetTTLs: %v, want 1m", got.Config.TTL)
	}
	if _, err := m.SetTTL(ctx, "sb-nosuch", time.Minute); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("SetTTL on an unknown sandbox: %v, want ErrNotFound", err)
	}
	if _, err := m.SetTTL(ctx, info.ID, 2*time.Hour); err != nil {
		t.Errorf("SetTTL at the cap: %v", err)
	}
}
