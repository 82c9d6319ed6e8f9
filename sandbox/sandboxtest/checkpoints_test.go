package sandboxtest_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// value returns the stand-in interpreter's value of name in sandbox id,
// or "" when it is not defined.
func value(t *testing.T, m *sandboxtest.Manager, id, name string) string {
	t.Helper()
	res, err := m.RunCell(ctx, id, sandbox.Cell{Code: "print(" + name + ")", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(res.Stdout)
}

func ns(infos []sandbox.CheckpointInfo) []int {
	var out []int
	for _, i := range infos {
		out = append(out, i.N)
	}
	return out
}

func list(t *testing.T, m *sandboxtest.Manager, id string) []int {
	t.Helper()
	infos, err := m.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return ns(infos)
}

// TestCheckpointEveryCellUndoRestore: with every-cell checkpoints each
// cell's result carries its checkpoint; undo brings the variable back to
// the cell before, a restore to checkpoint 1 further, and the execution
// count with it; the checkpoints after the restored one are dropped and
// the next is numbered after it.
func TestCheckpointEveryCellUndoRestore(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	for i, code := range []string{"x = 1", "x = 2", "x = 3"} {
		res, _ := run(t, m, id, code)
		if res.Checkpoint != i+1 || res.CheckpointError != "" {
			t.Fatalf("%s: checkpoint %d %q, want %d", code, res.Checkpoint, res.CheckpointError, i+1)
		}
	}
	infos, err := m.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("x = 2"))
	if c := infos[1]; c.Kind != sandbox.CheckpointCell || c.ExecutionCount != 2 || c.CodeSHA256 != hex.EncodeToString(sum[:]) || c.Depth != 2 || c.SizeBytes <= 0 {
		t.Errorf("checkpoint 2: %+v", c)
	}
	info, err := m.Undo(ctx, id)
	if err != nil || info.N != 2 {
		t.Fatalf("Undo = %+v, %v; want checkpoint 2", info, err)
	}
	// value's cell records checkpoint 3 again, after 2.
	if v := value(t, m, id, "x"); v != "2" {
		t.Errorf("x after undo = %q, want 2", v)
	}
	if info, err := m.RestoreCheckpoint(ctx, id, 1); err != nil || info.N != 1 {
		t.Fatalf("RestoreCheckpoint(1) = %+v, %v", info, err)
	}
	if got := list(t, m, id); len(got) != 1 || got[0] != 1 {
		t.Errorf("after restoring 1: checkpoints %v, want [1]", got)
	}
	res, _ := run(t, m, id, "x")
	if res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != "1" || res.ExecutionCount != 2 || res.Checkpoint != 2 {
		t.Errorf("x after restoring 1: %+v, want 1, execution count 2, checkpoint 2", res)
	}
}

// TestCheckpointRestoresFiles: a file uploaded after a checkpoint is gone
// after its restore, and one overwritten is back as it was.
func TestCheckpointRestoresFiles(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{}})
	if _, err := m.Upload(ctx, id, "/workspace/a", strings.NewReader("old")); err != nil {
		t.Fatal(err)
	}
	cp, err := m.Checkpoint(ctx, id)
	if err != nil || cp.N != 1 || cp.Kind != sandbox.CheckpointManual || cp.CodeSHA256 != "" {
		t.Fatalf("Checkpoint = %+v, %v", cp, err)
	}
	// Without every_cell, a cell records nothing.
	if res, _ := run(t, m, id, "y = 5"); res.Checkpoint != 0 || res.CheckpointError != "" {
		t.Errorf("a cell without every_cell: checkpoint %d %q", res.Checkpoint, res.CheckpointError)
	}
	for path, data := range map[string]string{"/workspace/a": "new", "/workspace/b": "b"} {
		if _, err := m.Upload(ctx, id, path, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.RestoreCheckpoint(ctx, id, 1); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := m.Download(ctx, id, "/workspace/a", &buf); err != nil || buf.String() != "old" {
		t.Errorf("a after restore = %q, %v; want old", buf.String(), err)
	}
	if _, err := m.Download(ctx, id, "/workspace/b", io.Discard); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("b after restore: %v, want not found", err)
	}
	if v := value(t, m, id, "y"); v != "" {
		t.Errorf("y after restore = %q, want undefined", v)
	}
}

// TestCheckpointKeep: keep 3 leaves the last three, numbered on; the
// oldest kept is the base (depth 1, a whole image).
func TestCheckpointKeep(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{MemoryMiB: 256, Checkpoints: &sandbox.CheckpointConfig{EveryCell: true, Keep: 3}})
	for range 5 {
		run(t, m, id, "x = 1")
	}
	infos, err := m.Checkpoints(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got := ns(infos); len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Fatalf("keep 3 after 5 cells: %v, want [3 4 5]", got)
	}
	if infos[0].Depth != 1 || infos[0].SizeBytes != 256<<20 || infos[2].Depth != 3 || infos[2].SizeBytes >= 256<<20 {
		t.Errorf("depths and sizes: %+v", infos)
	}
	if _, err := m.RestoreCheckpoint(ctx, id, 2); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("restore of dropped checkpoint 2: %v, want not found", err)
	}
}

// TestCheckpointExec: an exec records a checkpoint of kind exec, its
// digest that of the argv joined by NULs.
func TestCheckpointExec(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	res, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"echo", "hi"}, Timeout: time.Minute})
	if err != nil || res.Checkpoint != 1 || res.Stdout != "hi\n" {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	infos, _ := m.Checkpoints(ctx, id)
	sum := sha256.Sum256([]byte("echo\x00hi"))
	if len(infos) != 1 || infos[0].Kind != sandbox.CheckpointExec || infos[0].CodeSHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("checkpoints: %+v", infos)
	}
}

// TestCheckpointFailure: a checkpoint that fails is in the result, and
// the sandbox runs on; once it works again, the next is recorded.
func TestCheckpointFailure(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	m.Fail("Checkpoint", errors.New("no space left on device"))
	res, _ := run(t, m, id, "x = 1")
	if res.Status != cell.StatusOK || res.Checkpoint != 0 || !strings.Contains(res.CheckpointError, "no space left") {
		t.Errorf("a failed checkpoint: %+v", res)
	}
	m.Fail("Checkpoint", nil)
	if res, _ := run(t, m, id, "x"); res.Checkpoint != 1 || res.MainResult() == nil {
		t.Errorf("after the failure: %+v", res)
	}
}

// TestCheckpointRefusals: without checkpoints each call is invalid; an
// undo with fewer than two kept and a checkpoint not kept are not found;
// a cell running makes them busy; another sandbox's id is not found.
func TestCheckpointRefusals(t *testing.T) {
	m := sandboxtest.New()
	plain := create(t, m, sandbox.Config{})
	if _, err := m.Checkpoint(ctx, plain); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Checkpoint without checkpoints: %v", err)
	}
	if _, err := m.Checkpoints(ctx, plain); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Checkpoints without checkpoints: %v", err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: plain, N: 1}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a branch of a sandbox without checkpoints: %v", err)
	}
	if _, err := m.Checkpoint(ctx, "sb-nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Checkpoint of no sandbox: %v", err)
	}
	id := create(t, m, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{}})
	if _, err := m.Checkpoint(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Undo(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Undo with one kept: %v", err)
	}
	if _, err := m.RestoreCheckpoint(ctx, id, 7); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RestoreCheckpoint(7): %v", err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: id, N: 2}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a branch of checkpoint 2, not kept: %v", err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Tenant: "other", Checkpoint: &sandbox.CheckpointRef{Sandbox: id, N: 1}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another tenant's branch: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = m.RunCell(ctx, id, sandbox.Cell{Code: "gate", Timeout: time.Minute}, nil)
	}()
	waitRunning(t, m, id)
	if _, err := m.Undo(ctx, id); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("Undo while a cell runs: %v", err)
	}
	if _, err := m.Checkpoint(ctx, id); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("Checkpoint while a cell runs: %v", err)
	}
	if err := m.Interrupt(ctx, id); err != nil {
		t.Fatal(err)
	}
	<-done
}

func waitRunning(t *testing.T, m *sandboxtest.Manager, id string) {
	t.Helper()
	for range 500 {
		if info, _ := m.Get(ctx, id); info.CellRunning {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the cell never started")
}

// TestCheckpointBranch: two branches of checkpoint 1 start with its
// variables, keep apart from each other and leave the parent alone.
func TestCheckpointBranch(t *testing.T) {
	m := sandboxtest.New()
	parent := create(t, m, sandbox.Config{MemoryMiB: 256, Env: map[string]string{"K": "v"}, Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	run(t, m, parent, "x = 1")
	run(t, m, parent, "x = 5")
	ref := &sandbox.CheckpointRef{Sandbox: parent, N: 1}
	var kids []string
	for _, v := range []string{"10", "20"} {
		info, err := m.Create(ctx, sandbox.Config{Checkpoint: ref})
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MemoryMiB != 256 || info.Config.Env["K"] != "v" || info.StartedFrom != sandbox.StartedFromSnapshot || info.Cells != 1 {
			t.Errorf("branch info: %+v", info)
		}
		if got := value(t, m, info.ID, "x"); got != "1" {
			t.Errorf("x in a new branch = %q, want 1", got)
		}
		run(t, m, info.ID, "x = "+v)
		kids = append(kids, info.ID)
	}
	if a, b, p := value(t, m, kids[0], "x"), value(t, m, kids[1], "x"), value(t, m, parent, "x"); a != "10" || b != "20" || p != "5" {
		t.Errorf("x: branches %s %s, parent %s; want 10 20 5", a, b, p)
	}
	if _, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512, Checkpoint: ref}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a branch with other memory: %v", err)
	}
}
