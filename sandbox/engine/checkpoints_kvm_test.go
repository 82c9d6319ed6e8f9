package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// ckCell runs code in a sandbox with every-cell checkpoints and returns
// its result, failing t unless it completed and recorded a checkpoint.
func ckCell(t *testing.T, m sandbox.Manager, id, code string) cell.Result {
	t.Helper()
	r := runCell(t, m, id, code, 5*time.Minute)
	if r.Status != cell.StatusOK {
		t.Fatalf("cell %q: %s %+v", code, r.Status, r.Error)
	}
	if r.Checkpoint < 1 || r.CheckpointError != "" {
		t.Fatalf("cell %q: checkpoint %d, error %q; want a checkpoint", code, r.Checkpoint, r.CheckpointError)
	}
	return r
}

// timeTravel is the checkpoint scenario on sandbox id (every-cell
// checkpoints): undo, restore with files rolled back, two branches apart
// from each other and from their parent, and a small layer for a small
// cell.
func timeTravel(t *testing.T, m *VMManager, id string) {
	ctx := context.Background()
	const file = "/tmp/cellvm-checkpoint.txt"
	n1 := ckCell(t, m, id, "import os\nx = 1").Checkpoint
	n2 := ckCell(t, m, id, "x = 2\nopen('"+file+"', 'w').write('written after checkpoint 1')").Checkpoint
	n3 := ckCell(t, m, id, "del x").Checkpoint
	if n2 <= n1 || n3 <= n2 {
		t.Fatalf("checkpoints %d then %d", n1, n2)
	}

	start := time.Now()
	undone, err := m.Undo(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("undo to %d in %v", undone.N, time.Since(start).Round(time.Millisecond))
	if undone.N != n2 {
		t.Errorf("undo restored checkpoint %d, want %d", undone.N, n2)
	}
	if got := mainText(t, m, id, "x"); got != "2" {
		t.Fatalf("after undo: x = %s, want 2", got)
	}

	start = time.Now()
	if _, err := m.RestoreCheckpoint(ctx, id, n1); err != nil {
		t.Fatal(err)
	}
	t.Logf("restore of %d in %v", n1, time.Since(start).Round(time.Millisecond))
	if got := mainText(t, m, id, "(x, os.path.exists('"+file+"'))"); got != "(1, False)" {
		t.Fatalf("after restoring checkpoint %d: (x, file exists) = %s, want (1, False)", n1, got)
	}
	// The cell above recorded n1+1; n3 went with the restore.
	if _, err := m.RestoreCheckpoint(ctx, id, n3); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("restore of checkpoint %d, dropped by the restore of %d: %v, want not found", n3, n1, err)
	}

	var branches []string
	for _, v := range []string{"10", "20"} {
		start := time.Now()
		b, err := m.Create(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: id, N: n1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("branch %s of checkpoint %d in %v", b.ID, n1, time.Since(start).Round(time.Millisecond))
		runCell(t, m, b.ID, "x = "+v, time.Minute)
		branches = append(branches, b.ID)
	}
	for i, v := range []string{"10", "20"} {
		if got := mainText(t, m, branches[i], "x"); got != v {
			t.Errorf("branch %d: x = %s, want %s", i, got, v)
		}
	}
	if got := mainText(t, m, id, "x"); got != "1" {
		t.Errorf("parent after its branches: x = %s, want 1", got)
	}
	u0 := mainText(t, m, branches[0], "os.urandom(16).hex()")
	u1 := mainText(t, m, branches[1], "os.urandom(16).hex()")
	if u0 == u1 {
		t.Errorf("two branches drew the same os.urandom bytes: %s", u0)
	}
	for _, b := range branches {
		if err := m.Delete(ctx, b); err != nil {
			t.Error(err)
		}
	}

	r := ckCell(t, m, id, "b = bytearray(1 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1")
	cps, err := m.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i, cp := range cps {
		if cp.N == r.Checkpoint && i > 0 {
			found = true
			t.Logf("a cell touching 1 MiB: checkpoint %d of %d bytes, depth %d, paused %d ms", cp.N, cp.SizeBytes, cp.Depth, cp.PauseMS)
			if cp.SizeBytes >= 8<<20 {
				t.Errorf("a cell touching 1 MiB made a checkpoint of %d bytes, want under 8 MiB", cp.SizeBytes)
			}
		}
	}
	if !found {
		t.Errorf("checkpoint %d of the cell touching 1 MiB is not listed as a layer: %+v", r.Checkpoint, cps)
	}
}

// TestCheckpointsTimeTravel: a cold-booted sandbox with every-cell
// checkpoints (timeTravel); then keep 3 keeps at most 3 within the disk
// budget; a sandbox created without checkpoints refuses them.
func TestCheckpointsTimeTravel(t *testing.T) {
	const budget = 2 << 30
	m := newRigManagerWith(t, func(o *Options) { o.CheckpointMaxBytes = budget })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512, Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	if err != nil {
		t.Fatal(err)
	}
	timeTravel(t, m, info.ID)

	kept, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512, Checkpoints: &sandbox.CheckpointConfig{EveryCell: true, Keep: 3}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		ckCell(t, m, kept.ID, "y = "+strings.Repeat("1", i+1))
	}
	cps, err := m.Checkpoints(ctx, kept.ID)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, cp := range cps {
		sum += cp.SizeBytes
	}
	dir := m.checkpointDir(kept.ID, m.sandboxDir(kept.ID))
	t.Logf("keep 3: %d kept, %d bytes by their sizes, %d on disk", len(cps), sum, dirUsage(dir))
	if len(cps) > 3 {
		t.Errorf("keep 3 kept %d checkpoints", len(cps))
	}
	if sum > budget || dirUsage(dir) > budget {
		t.Errorf("keep 3: %d bytes (%d on disk), over the budget of %d", sum, dirUsage(dir), int64(budget))
	}
	if got := mainText(t, m, kept.ID, "y"); got != "111111" {
		t.Errorf("y = %s", got)
	}
	if err := m.Delete(ctx, kept.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a deleted sandbox's checkpoints are still there: %v", err)
	}

	plain, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Checkpoint(ctx, plain.ID); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("checkpoint of a sandbox created without them: %v, want invalid", err)
	}
	if r := runCell(t, m, plain.ID, "1", time.Minute); r.Checkpoint != 0 || r.CheckpointError != "" {
		t.Errorf("a cell of a sandbox without checkpoints: checkpoint %d %q", r.Checkpoint, r.CheckpointError)
	}
}

// TestCheckpointsFromTemplate: a template-started sandbox's first
// checkpoint is a layer over the template's files (depth 2), and the
// time-travel scenario holds there too.
func TestCheckpointsFromTemplate(t *testing.T) {
	start := time.Now()
	m := newRigManagerWith(t, func(o *Options) { o.Templates = TemplateOptions{Enabled: true} })
	waitRigTemplate(t, m, start)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	if err != nil {
		t.Fatal(err)
	}
	if info.StartedFrom != sandbox.StartedFromTemplate {
		t.Fatalf("started from %q, want a template", info.StartedFrom)
	}
	ckCell(t, m, info.ID, "first = 1")
	cps, err := m.Checkpoints(ctx, info.ID)
	if err != nil || len(cps) != 1 {
		t.Fatalf("checkpoints %+v, %v", cps, err)
	}
	t.Logf("first checkpoint of a template start: %d bytes, depth %d, paused %d ms", cps[0].SizeBytes, cps[0].Depth, cps[0].PauseMS)
	if cps[0].Depth != 2 {
		t.Errorf("first checkpoint of a template start has depth %d, want 2 (a layer over the template's memory)", cps[0].Depth)
	}
	timeTravel(t, m, info.ID)
}

// TestCheckpointFullDisk: checkpoints on a full file system (a 1 MiB
// tmpfs) fail with checkpoint_error, and the sandbox answers the next
// cell with its variables.
func TestCheckpointFullDisk(t *testing.T) {
	kvmtest.Require(t)
	ckDir := t.TempDir()
	if err := syscall.Mount("tmpfs", ckDir, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Skipf("mount a 1 MiB tmpfs (the rig runs as root): %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(ckDir, syscall.MNT_DETACH) })
	m := newRigManagerWith(t, func(o *Options) { o.CheckpointDir = ckDir })
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 256, Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	if err != nil {
		t.Fatal(err)
	}
	r := runCell(t, m, info.ID, "x = 41", 5*time.Minute)
	t.Logf("a checkpoint on a full disk: %q", r.CheckpointError)
	if r.Status != cell.StatusOK || r.Checkpoint != 0 || r.CheckpointError == "" {
		t.Fatalf("cell on a full checkpoint disk: %s, checkpoint %d, error %q; want ok with a checkpoint_error", r.Status, r.Checkpoint, r.CheckpointError)
	}
	if got := mainText(t, m, info.ID, "x + 1"); got != "42" {
		t.Errorf("the sandbox after a failed checkpoint: x + 1 = %s, want 42", got)
	}
	if _, err := m.Checkpoint(ctx, info.ID); err == nil {
		t.Error("a manual checkpoint on a full disk succeeded")
	}
	ents, _ := os.ReadDir(filepath.Join(ckDir, info.ID))
	for _, e := range ents {
		if strings.Contains(e.Name(), "partial") {
			t.Errorf("a failed checkpoint left %s", e.Name())
		}
	}
}
