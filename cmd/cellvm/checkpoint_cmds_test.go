package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestCheckpointCommands: a sandbox created with --checkpoints --keep 3
// reports each cell's checkpoint, lists them, undoes the last cell,
// restores one, records one on request and branches from one (with the
// parent's memory, not the default), over the fake daemon.
func TestCheckpointCommands(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create", "--memory", "1024", "--checkpoints", "--keep", "3").stdout)
	if id == "" {
		t.Fatal("no sandbox")
	}
	for i, code := range []string{"x = 1", "x = 2", "x = 3"} {
		r := d.cellvm(t, "cell", id, "-c", code)
		if want := "[checkpoint " + string(rune('1'+i)) + "]"; r.code != 0 || !strings.Contains(r.stderr, want) || r.stdout != "" {
			t.Fatalf("cell %q: %+v; want %s on stderr", code, r, want)
		}
	}
	ls := d.cellvm(t, "checkpoint", "ls", id)
	lines := strings.Split(strings.TrimSpace(ls.stdout), "\n")
	if ls.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "N ") || !strings.HasPrefix(lines[1], "1 ") || !strings.Contains(lines[1], "cell") {
		t.Fatalf("checkpoint ls: %+v", ls)
	}
	if r := d.cellvm(t, "checkpoint", "undo", id); r.code != 0 || strings.TrimSpace(r.stdout) != "2" {
		t.Fatalf("checkpoint undo: %+v, want 2", r)
	}
	// This cell records checkpoint 3 again, after 2.
	if r := d.cellvm(t, "cell", id, "-c", "print(x)"); r.stdout != "2\n" {
		t.Errorf("x after undo: %+v, want 2", r)
	}
	var info sandbox.CheckpointInfo
	r := d.cellvm(t, "checkpoint", "restore", id, "1", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != 0 || info.N != 1 || info.ExecutionCount != 1 {
		t.Fatalf("checkpoint restore 1 --json: %+v (%v)", r, err)
	}
	if r := d.cellvm(t, "cell", id, "-c", "print(x)"); r.stdout != "1\n" {
		t.Errorf("x after restoring 1: %+v, want 1", r)
	}
	if r := d.cellvm(t, "checkpoint", "create", id); r.code != 0 || strings.TrimSpace(r.stdout) != "3" {
		t.Errorf("checkpoint create: %+v, want 3", r)
	}
	var list []sandbox.CheckpointInfo
	r = d.cellvm(t, "checkpoint", "ls", id, "--json")
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 || list[2].Kind != sandbox.CheckpointManual {
		t.Errorf("checkpoint ls --json: %+v (%v)", r, err)
	}

	branch := d.cellvm(t, "checkpoint", "branch", id, "1")
	kid := strings.TrimSpace(branch.stdout)
	if branch.code != 0 || kid == "" || kid == id {
		t.Fatalf("checkpoint branch: %+v", branch)
	}
	d.cellvm(t, "cell", kid, "-c", "x = 10")
	if a, p := d.cellvm(t, "cell", kid, "-c", "print(x)"), d.cellvm(t, "cell", id, "-c", "print(x)"); a.stdout != "10\n" || p.stdout != "1\n" {
		t.Errorf("x: branch %q, parent %q; want 10 and 1", a.stdout, p.stdout)
	}
	// A branch has no checkpoints of its own unless asked.
	if r := d.cellvm(t, "checkpoint", "undo", kid); r.code == 0 || !strings.Contains(r.stderr, "without checkpoints") {
		t.Errorf("undo in a branch without checkpoints: %+v", r)
	}
	if r := d.cellvm(t, "checkpoint", "restore", id, "9"); r.code == 0 || !strings.Contains(r.stderr, "no checkpoint 9") {
		t.Errorf("restore 9: %+v", r)
	}
}

// TestCheckpointCreateFlags: --checkpoints alone means every cell, =manual
// records none after a cell, and --keep reaches the config.
func TestCheckpointCreateFlags(t *testing.T) {
	d := startFakeDaemon(t)
	for _, tc := range []struct {
		args      []string
		everyCell bool
		keep      int
	}{
		{[]string{"--checkpoints"}, true, sandbox.DefaultCheckpointKeep},
		{[]string{"--checkpoints=every-cell", "--keep", "5"}, true, 5},
		{[]string{"--checkpoints=manual"}, false, sandbox.DefaultCheckpointKeep},
	} {
		r := d.cellvm(t, append([]string{"sandbox", "create", "--json"}, tc.args...)...)
		var info sandbox.Info
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != 0 {
			t.Fatalf("create %v: %+v (%v)", tc.args, r, err)
		}
		cc := info.Config.Checkpoints
		if cc == nil || cc.EveryCell != tc.everyCell || cc.Keep != tc.keep {
			t.Errorf("create %v: checkpoints %+v", tc.args, cc)
		}
		c := d.cellvm(t, "cell", info.ID, "-c", "x = 1")
		if got := strings.Contains(c.stderr, "[checkpoint 1]"); got != tc.everyCell {
			t.Errorf("create %v: a cell's stderr %q", tc.args, c.stderr)
		}
	}
	r := d.cellvm(t, "sandbox", "create", "--json")
	var info sandbox.Info
	if json.Unmarshal([]byte(r.stdout), &info); info.Config.Checkpoints != nil {
		t.Errorf("create without --checkpoints: %+v", info.Config.Checkpoints)
	}
}
