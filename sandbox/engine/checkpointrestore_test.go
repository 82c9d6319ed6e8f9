package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// ckRun runs a cell in a sandbox with every-cell checkpoints and returns
// the checkpoint it recorded, failing t without one.
func ckRun(t *testing.T, m *VMManager, id, code string) int {
	t.Helper()
	r, err := m.RunCell(context.Background(), id, sandbox.Cell{Code: code, Timeout: time.Minute}, nil)
	if err != nil || r.Checkpoint < 1 || r.CheckpointError != "" {
		t.Fatalf("cell %q: %+v, %v; want a checkpoint", code, r, err)
	}
	return r.Checkpoint
}

// Restore, undo and branch through the manager, over the pausable fake
// VMM (whose restored guest reports the sum of the memory it composed)
// and a fake checkpointing VMM: each restores the image its checkpoint
// recorded; a restore drops the later checkpoints and the next one is a
// layer over it; a branch is a sandbox of its own; what is not there is
// not found, and a delete takes the checkpoints with it.
func TestCheckpointRestoreUndoBranch(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	vmm := newFakeCkVMM(t)
	want := map[int][]byte{}
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	memsum := func(id string) string { return cellText(t, m, id, "memsum") }
	for n := 1; n <= 3; n++ {
		vmm.write(int64(n)*3*pageBytes, []byte(fmt.Sprint("checkpoint ", n)))
		if got := ckRun(t, m, id, fmt.Sprint("a = ", n)); got != n {
			t.Fatalf("checkpoint %d, want %d", got, n)
		}
		want[n] = slices.Clone(vmm.img)
	}
	sumOf := func(n int) string { return fmt.Sprintf("%08x", crc32c(want[n])) }

	// restored has the fake checkpointing VMM run checkpoint n's memory,
	// as the VMM a restore started does.
	restored := func(n int) {
		vmm.img, vmm.started = slices.Clone(want[n]), true
		clear(vmm.dirty)
	}
	in, err := m.Undo(ctx, id)
	if err != nil || in.N != 2 {
		t.Fatalf("undo: %+v, %v", in, err)
	}
	restored(2)
	if info, err := m.Get(ctx, id); err != nil || info.Cells != in.ExecutionCount {
		t.Fatalf("after undo Info.Cells is %d (%v), want checkpoint 2's count %d", info.Cells, err, in.ExecutionCount)
	}
	if cps, _ := m.Checkpoints(ctx, id); len(cps) != 2 {
		t.Fatalf("after undo %d checkpoints kept, want 2", len(cps))
	}
	// The cell that reads the memory's sum records checkpoint 3, an empty
	// layer over 2 (it wrote nothing).
	if got := memsum(id); got != sumOf(2) {
		t.Fatalf("after undo the guest restored memory summing to %s, want checkpoint 2's %s", got, sumOf(2))
	}
	want[3] = slices.Clone(want[2])
	vmm.write(20*pageBytes, []byte("after the undo"))
	if got := ckRun(t, m, id, "b = 1"); got != 4 {
		t.Fatalf("the second checkpoint after an undo to 2 is %d, want 4", got)
	}
	if slices.Contains(vmm.fulls[3:], true) {
		t.Errorf("a checkpoint after a restore asked for a whole image, not a layer over it: %v", vmm.fulls)
	}
	want[4] = slices.Clone(vmm.img)
	if _, err := m.RestoreCheckpoint(ctx, id, 4); err != nil {
		t.Fatal(err)
	}
	restored(4)
	if got := memsum(id); got != sumOf(4) {
		t.Fatalf("restore of 4 (layers over the restored 2) gave memory summing to %s, want %s", got, sumOf(4))
	}
	if _, err := m.RestoreCheckpoint(ctx, id, 3); err != nil {
		t.Fatal(err)
	}
	restored(3)
	if got := memsum(id); got != sumOf(3) {
		t.Fatalf("restore of 3 (an empty layer) gave memory summing to %s, want %s", got, sumOf(3))
	}

	b, err := m.Create(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: id, N: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := memsum(b.ID); got != sumOf(1) {
		t.Errorf("branch of checkpoint 1: memory sums to %s, want %s", got, sumOf(1))
	}
	if b.StartedFrom != sandbox.StartedFromSnapshot || b.ID == id {
		t.Errorf("branch %+v", b)
	}
	if got := memsum(id); got != sumOf(3) {
		t.Errorf("the parent after its branch: memory sums to %s, want %s", got, sumOf(3))
	}
	if _, err := m.RestoreCheckpoint(ctx, id, 2); err != nil {
		t.Fatal(err)
	}

	if _, err := m.RestoreCheckpoint(ctx, id, 99); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("restore of 99: %v, want not found", err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: id, N: 99}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("branch of 99: %v, want not found", err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: b.ID, N: 1}}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("branch of a sandbox without checkpoints: %v, want not found", err)
	}
	if _, err := m.Checkpoint(ctx, b.ID); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("checkpoint of a sandbox without checkpoints: %v, want invalid", err)
	}
	if _, err := m.Undo(ctx, b.ID); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("undo in a sandbox without checkpoints: %v, want invalid", err)
	}
	dir := m.checkpointDir(id, m.sandboxDir(id))
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "branch-") || strings.Contains(e.Name(), "partial") {
			t.Errorf("left in the checkpoint directory: %s", e.Name())
		}
	}
	// A manual checkpoint is the one after the restored 2.
	restored(2)
	if in, err := m.Checkpoint(ctx, id); err != nil || in.N != 3 || in.Kind != sandbox.CheckpointManual || in.Depth != 3 {
		t.Errorf("manual checkpoint: %+v, %v", in, err)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a deleted sandbox's checkpoints are still there: %v", err)
	}
}

// A guest's result that claims a checkpoint is not believed: a sandbox
// without checkpoints answers none, and one with them the host's.
func TestCheckpointNotFromGuest(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var end *cell.Result
	r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "a = 1", Timeout: time.Minute}, func(ev cell.Event) {
		if ev.Type == cell.EventEnd {
			end = ev.End
		}
	})
	if err != nil || r.Checkpoint != 0 || r.CheckpointError != "" {
		t.Errorf("a cell in a sandbox without checkpoints: %+v, %v", r, err)
	}
	if end != nil && (end.Checkpoint != 0 || end.CheckpointError != "") {
		t.Errorf("its end event names a checkpoint: %+v", end)
	}
}
