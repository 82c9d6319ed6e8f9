package engine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// mainText is a cell's main result as text, failing t if there is none.
func mainText(t *testing.T, m sandbox.Manager, id, code string) string {
	t.Helper()
	r := runCell(t, m, id, code, 5*time.Minute)
	if r.MainResult() == nil {
		t.Fatalf("cell %q in %s: no result: %+v", code, id, r)
	}
	return r.MainResult().Data["text/plain"]
}

// draw is what a fork's generators give and what its clock says.
type draw struct {
	urandom, random, numpy string
	clock                  float64
	hostBefore, hostAfter  float64
}

func drawIn(t *testing.T, m sandbox.Manager, id string) draw {
	t.Helper()
	before := float64(time.Now().UnixNano()) / 1e9
	out := mainText(t, m, id, "'|'.join([os.urandom(16).hex(), repr(random.random()), repr(numpy.random.random()), repr(time.time())])")
	after := float64(time.Now().UnixNano()) / 1e9
	f := strings.Split(strings.Trim(out, "'"), "|")
	if len(f) != 4 {
		t.Fatalf("draw in %s: %q", id, out)
	}
	clock, err := strconv.ParseFloat(f[3], 64)
	if err != nil {
		t.Fatalf("draw in %s: clock %q", id, f[3])
	}
	return draw{urandom: f[0], random: f[1], numpy: f[2], clock: clock, hostBefore: before, hostAfter: after}
}

// TestSnapshotAndFork, through the Manager: a variable set before a
// snapshot is there in each fork, a change in a fork stays in that fork,
// the parent carries on with its own, two forks draw different os.urandom,
// random and NumPy values, and each fork's clock is the host's. Bad forks
// are refused and leave nothing behind.
func TestSnapshotAndFork(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	parent, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	runCell(t, m, parent.ID, "import os, random, time, numpy\nx = 41\nnumpy.random.random()", 5*time.Minute)
	start := time.Now()
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("snapshot %s of %s: %d bytes on disk in %v", snap.ID, parent.ID, snap.SizeBytes, time.Since(start).Round(time.Millisecond))
	if snap.SandboxID != parent.ID || snap.VCPUs != 1 || snap.MemoryMiB != 512 || snap.SizeBytes <= 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	// The parent keeps running, with its variables, past the reset of its
	// agent connections.
	if got := mainText(t, m, parent.ID, "x += 1\nx"); got != "42" {
		t.Fatalf("parent after its snapshot: x = %s, want 42", got)
	}

	var forks []sandbox.Info
	for range 2 {
		start := time.Now()
		f, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("fork %s up in %v", f.ID, time.Since(start).Round(time.Millisecond))
		if f.Config.VCPUs != 1 || f.Config.MemoryMiB != 512 || f.ID == parent.ID {
			t.Fatalf("fork %+v", f)
		}
		forks = append(forks, f)
	}
	for _, f := range forks {
		if got := mainText(t, m, f.ID, "x"); got != "41" {
			t.Errorf("fork %s: x = %s, want the snapshot's 41", f.ID, got)
		}
	}
	runCell(t, m, forks[0].ID, "x = 1000", time.Minute)
	if got := mainText(t, m, forks[1].ID, "x"); got != "41" {
		t.Errorf("a change in one fork reached another: x = %s", got)
	}
	if got := mainText(t, m, parent.ID, "x"); got != "42" {
		t.Errorf("a change in a fork reached the parent: x = %s", got)
	}

	a, b := drawIn(t, m, forks[0].ID), drawIn(t, m, forks[1].ID)
	t.Logf("fork draws: %+v / %+v", a, b)
	if a.urandom == b.urandom || a.random == b.random || a.numpy == b.numpy {
		t.Errorf("two forks drew the same numbers: %+v and %+v", a, b)
	}
	for _, d := range []draw{a, b} {
		if d.clock < d.hostBefore-1 || d.clock > d.hostAfter+1 {
			t.Errorf("a fork's clock reads %.3f, the host's was %.3f..%.3f", d.clock, d.hostBefore, d.hostAfter)
		}
	}

	list, err := m.ListSnapshots(ctx)
	if err != nil || len(list) != 1 || list[0].ID != snap.ID {
		t.Fatalf("ListSnapshots = %+v, %v", list, err)
	}
	before, _ := m.List(ctx)
	for _, c := range []struct {
		cfg  sandbox.Config
		want error
	}{
		{sandbox.Config{Snapshot: "snap-000000000000"}, sandbox.ErrNotFound},
		{sandbox.Config{Snapshot: snap.ID, MemoryMiB: 1024}, sandbox.ErrInvalid},
		{sandbox.Config{Snapshot: snap.ID, VCPUs: 2}, sandbox.ErrInvalid},
		{sandbox.Config{Snapshot: "../../etc"}, sandbox.ErrInvalid},
	} {
		if _, err := m.Create(ctx, c.cfg); !errors.Is(err, c.want) {
			t.Errorf("fork %+v: %v, want %v", c.cfg, err, c.want)
		}
	}
	if after, _ := m.List(ctx); len(after) != len(before) {
		t.Errorf("refused forks left sandboxes behind: %d before, %d after", len(before), len(after))
	}

	// Deleting the snapshot leaves its forks running.
	if err := m.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetSnapshot(ctx, snap.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("GetSnapshot after delete: %v", err)
	}
	if got := mainText(t, m, forks[1].ID, "x + 1"); got != "42" {
		t.Errorf("a fork after its snapshot was deleted: %s", got)
	}
}
