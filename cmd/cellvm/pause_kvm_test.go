package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestPauseToDisk, through the daemon: a pause ends the sandbox's VMM
// process, and a later cell resumes it by itself with its variables; a
// paused sandbox and a snapshot survive kill -9 of the daemon: the next
// daemon takes the sandbox back paused, resumes it with its variables and
// the host's clock, and forks the snapshot. A resume keeps the user's
// seeded generators' sequences (np.random.seed(0): the draw after the
// resume is the unpaused sequence's second). Nothing is left after.
func TestPauseToDisk(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	d := startDaemon(t, dir)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 384})
	if err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	mustCell(t, c, info.ID, "import time\nx = 41", 5*time.Minute)
	// The user's seeded generators: the unpaused sequence first (ref),
	// then its first draw before the pause; a resume must carry it on.
	mustCell(t, c, info.ID, "import numpy as np, random\n"+
		"np.random.seed(0); ref = np.random.random(2); random.seed(0); pref = [random.random() for _ in range(2)]\n"+
		"np.random.seed(0); a = np.random.random(); random.seed(0); pa = random.random()", 5*time.Minute)
	before := vmmProcesses(d.state)
	start := time.Now()
	if err := c.Pause(ctx, info.ID); err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	t.Logf("pause to disk took %v", time.Since(start).Round(time.Millisecond))
	if got, _ := c.Get(ctx, info.ID); got.State != sandbox.StatePaused {
		t.Errorf("state after pause: %s", got.State)
	}
	if left := vmmProcesses(d.state); len(left) != 0 {
		t.Errorf("VMM processes after the pause: %v (before: %v)", left, before)
	}
	start = time.Now()
	if v := text(mustCell(t, c, info.ID, "f'{x} {np.random.random() == ref[1]} {random.random() == pref[1]}'", 5*time.Minute)); v != "'41 True True'" {
		t.Errorf("x and the seeded generators' next draws after an auto-resume: %q, want '41 True True' (a resume must not reseed the user's generators)", v)
	}
	t.Logf("cell on a paused sandbox (resume and cell) took %v", time.Since(start).Round(time.Millisecond))
	if got, _ := c.Get(ctx, info.ID); got.State != sandbox.StateRunning || len(vmmProcesses(d.state)) != 1 {
		t.Errorf("after the auto-resume: state %s, VMM processes %v", got.State, vmmProcesses(d.state))
	}

	snap, err := c.Snapshot(ctx, info.ID)
	if err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	if err := c.Pause(ctx, info.ID); err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	d.cmd.Process.Kill() // kill -9 of the daemon
	d.cmd.Wait()
	os.Remove(d.socket)
	d2 := startDaemon(t, dir)
	defer func() {
		d2.stop(t)
		if left := vmmProcesses(d.state); len(left) != 0 {
			t.Errorf("VMM processes left after the daemon's shutdown: %v", left)
		}
		if ents, _ := os.ReadDir(filepath.Join(d.state, "sandboxes")); len(ents) != 0 {
			t.Errorf("sandbox files left after the daemon's shutdown: %v", ents)
		}
	}()
	c2 := api.NewClient(d2.socket)
	if got, err := c2.Get(ctx, info.ID); err != nil || got.State != sandbox.StatePaused {
		t.Fatalf("the restarted daemon's paused sandbox: %+v, %v", got, err)
	}
	start = time.Now()
	if err := c2.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("resume from disk took %v", time.Since(start).Round(time.Millisecond))
	hostBefore := float64(time.Now().UnixNano()) / 1e9
	out := text(mustCell(t, c2, info.ID, "f'{x} {time.time()}'", 5*time.Minute))
	hostAfter := float64(time.Now().UnixNano()) / 1e9
	f := strings.Fields(strings.Trim(out, "'"))
	if len(f) != 2 || f[0] != "41" {
		t.Fatalf("x and the clock after a restart and resume: %q", out)
	}
	if clock, err := strconv.ParseFloat(f[1], 64); err != nil || clock < hostBefore-1 || clock > hostAfter+1 {
		t.Errorf("the resumed guest's clock reads %s, the host's was %.3f..%.3f", f[1], hostBefore, hostAfter)
	}
	fork, err := c2.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("fork of a snapshot after the restart: %v", err)
	}
	if v := text(mustCell(t, c2, fork.ID, "x", 5*time.Minute)); v != "41" {
		t.Errorf("x in a fork made after the restart: %q", v)
	}
	if err := c2.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Error(err)
	}
}
