package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// withServeLifetimes sets the options serve gives by default: 1 h and
// 15 min, and a cap when max is not 0.
func withServeLifetimes(max time.Duration) func(*Options) {
	return func(o *Options) {
		o.DefaultTTL, o.DefaultIdleTimeout, o.MaxTTL = time.Hour, 15*time.Minute, max
	}
}

// TestCreateGetsTheDefaultLifetimes: a create that names no TTL or idle
// timeout gets the options' defaults, shown in its info and saved with
// it; one that names them, or never, keeps what it named.
func TestCreateGetsTheDefaultLifetimes(t *testing.T) {
	m, _ := newPausableManager(t, withServeLifetimes(0))
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.TTL != time.Hour || info.Config.IdleTimeout != 15*time.Minute {
		t.Errorf("a create without lifetimes has TTL %v, IdleTimeout %v; want 1h, 15m", info.Config.TTL, info.Config.IdleTimeout)
	}
	b, err := os.ReadFile(filepath.Join(m.sandboxDir(info.ID), configFile))
	if err != nil || !strings.Contains(string(b), `"ttl_s":3600,"idle_timeout_s":900`) {
		t.Errorf("saved config %s (%v), want ttl_s 3600 and idle_timeout_s 900", b, err)
	}
	own, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, TTL: sandbox.Never, IdleTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if own.Config.TTL != sandbox.Never || own.Config.IdleTimeout != 2*time.Minute {
		t.Errorf("a create with TTL never and a 2 min idle timeout has TTL %v, IdleTimeout %v", own.Config.TTL, own.Config.IdleTimeout)
	}
	// A fork's lifetimes are its own create's, not its parent's.
	snap, err := m.Snapshot(ctx, own.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if fork.Config.TTL != time.Hour || fork.Config.IdleTimeout != 15*time.Minute {
		t.Errorf("a fork without lifetimes has TTL %v, IdleTimeout %v; want the defaults", fork.Config.TTL, fork.Config.IdleTimeout)
	}
}

// TestCreatePastMaxTTLIsRefused: under --max-ttl, a TTL above the cap or
// never is refused as invalid, naming the cap, and makes nothing; one at
// the cap, and an idle timeout of never, are taken.
func TestCreatePastMaxTTLIsRefused(t *testing.T) {
	m, state := newPausableManager(t, withServeLifetimes(2*time.Hour))
	ctx := context.Background()
	for _, ttl := range []time.Duration{sandbox.Never, 2*time.Hour + time.Second, sandbox.MaxTTL} {
		_, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, TTL: ttl})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "cap") || !strings.Contains(err.Error(), "7200 s (serve --max-ttl)") {
			t.Errorf("TTL %v under a 2 h cap: %v, want ErrInvalid naming the cap", ttl, err)
		}
	}
	assertNothingLeft(t, m, state)
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, TTL: 2 * time.Hour, IdleTimeout: sandbox.Never})
	if err != nil || info.Config.TTL != 2*time.Hour || info.Config.IdleTimeout != sandbox.Never {
		t.Errorf("TTL at the cap, no idle timeout: %+v, %v", info.Config, err)
	}
}

func TestManagerRefusesADefaultPastItsCap(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []func(*Options){
		func(o *Options) { o.MaxTTL = time.Hour },                                      // default none under a cap
		func(o *Options) { o.DefaultTTL, o.MaxTTL = 2*time.Hour, time.Hour },           // default above the cap
		func(o *Options) { o.DefaultIdleTimeout = sandbox.MaxTTL + time.Hour },         // past the contract's bound
		func(o *Options) { o.DefaultTTL, o.MaxTTL = time.Hour, -time.Hour },            // negative cap
		func(o *Options) { o.DefaultTTL, o.MaxTTL = 1500*time.Millisecond, time.Hour }, // not whole seconds
	} {
		var opt Options
		o(&opt)
		opt.Exe, opt.Kernel, opt.Initrd, opt.RootFS, opt.StateDir = exe, exe, exe, exe, t.TempDir()
		if m, err := NewVMManager(opt); err == nil {
			m.Close()
			t.Errorf("a manager with DefaultTTL %v, DefaultIdleTimeout %v, MaxTTL %v started", opt.DefaultTTL, opt.DefaultIdleTimeout, opt.MaxTTL)
		}
	}
}

// TestTakenBackSandboxKeepsItsLifetimes: a sandbox an older daemon saved
// with ttl_s 0 (none, then), or with no config at all, is taken back with
// no lifetime, whatever the new daemon's defaults; one saved with its
// lifetimes keeps them.
func TestTakenBackSandboxKeepsItsLifetimes(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	var ids []string
	for range 3 {
		info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64, TTL: 90 * time.Second, IdleTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	old := `{"vcpus":1,"memory_mib":64,"ttl_s":0,"idle_timeout_s":0}`
	if err := os.WriteFile(filepath.Join(m.sandboxDir(ids[0]), configFile), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(m.sandboxDir(ids[1]), configFile)); err != nil {
		t.Fatal(err)
	}
	abandon(m)
	opt := m.opt
	withServeLifetimes(0)(&opt)
	m2, err := NewVMManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	for i, want := range [][2]time.Duration{{sandbox.Never, sandbox.Never}, {sandbox.Never, sandbox.Never}, {90 * time.Second, time.Minute}} {
		got, err := m2.Get(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if got.Config.TTL != want[0] || got.Config.IdleTimeout != want[1] {
			t.Errorf("sandbox %d taken back with TTL %v, IdleTimeout %v; want %v, %v", i, got.Config.TTL, got.Config.IdleTimeout, want[0], want[1])
		}
		b, _ := json.Marshal(got.Config)
		if want[0] == sandbox.Never && !strings.Contains(string(b), `"ttl_s":0`) {
			t.Errorf("sandbox %d's config reads %s, want ttl_s 0", i, b)
		}
	}
}
