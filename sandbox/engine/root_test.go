package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// TestRootOptionReachesTheGuest: "root": true is part of the strict JSON
// config, and only a sandbox created with it tells the guest (on its
// kernel command line) to run cells as root.
func TestRootOptionReachesTheGuest(t *testing.T) {
	var c sandbox.Config
	if err := json.Unmarshal([]byte(`{"root": true}`), &c); err != nil || !c.Root {
		t.Fatalf("decode {\"root\": true}: %+v, %v", c, err)
	}
	if b, _ := json.Marshal(sandbox.Config{}); strings.Contains(string(b), "root") {
		t.Errorf("a default config encodes root: %s", b)
	}
	m, _, _ := newHostileManager(t, nil)
	ctx := context.Background()
	for _, root := range []bool{false, true} {
		info, err := m.Create(ctx, sandbox.Config{Root: root})
		if err != nil {
			t.Fatal(err)
		}
		spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(info.ID), specFile))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(spec.Cmdline, "cellvm.cellsroot=1"); got != root {
			t.Errorf("root %v: guest command line %q", root, spec.Cmdline)
		}
		if got, _ := m.Get(ctx, info.ID); got.Config.Root != root {
			t.Errorf("root %v: info says %v", root, got.Config.Root)
		}
	}
}

// TestForkTakesTheSnapshotsRoot: whether a fork's cells run as root is the
// snapshot's (its guest's command line came with its memory): a fork of a
// root sandbox is root, and asking for root from an unprivileged one is
// refused.
func TestForkTakesTheSnapshotsRoot(t *testing.T) {
	m, _, _ := newHostileManager(t, nil)
	snap := func(id string, root bool) {
		t.Helper()
		meta := snapshotMeta{Info: sandbox.SnapshotInfo{ID: id, VCPUs: 1, MemoryMiB: 512}, Config: sandbox.Config{VCPUs: 1, MemoryMiB: 512, Root: root}}
		b, err := json.Marshal(meta)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(m.snapshotDir(id), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(m.snapshotDir(id), snapMetaFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const user, root = "snap-000000000001", "snap-000000000002"
	snap(user, false)
	snap(root, true)
	if _, _, err := m.forkConfig(sandbox.Config{Snapshot: user, Root: true}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("root fork of an unprivileged snapshot: %v, want ErrInvalid", err)
	}
	for _, c := range []struct {
		id   string
		want bool
	}{{user, false}, {root, true}} {
		cfg, _, err := m.forkConfig(sandbox.Config{Snapshot: c.id})
		if err != nil {
			t.Fatalf("fork of %s: %v", c.id, err)
		}
		if cfg.Root != c.want {
			t.Errorf("fork of %s: root %v, want %v", c.id, cfg.Root, c.want)
		}
	}
}
