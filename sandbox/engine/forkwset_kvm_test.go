package engine

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// TestForkWorkingSetPrefetched, in real microVMs: the first fork of a
// snapshot records, after its first cell, what its guest touched beside
// the snapshot; the second fork's VMM is handed that record, its log says
// what it prefetched before the first vCPU ran, and the fork has its
// parent's variables. Each fork's time to its first result is logged,
// not asserted (make bench compares them).
func TestForkWorkingSetPrefetched(t *testing.T) {
	m := newRigManagerWith(t, nil)
	ctx := context.Background()
	parent, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, parent.ID)
	if got := mainText(t, m, parent.ID, "x = 41\nx"); got != "41" {
		t.Fatalf("x = %s in the parent", got)
	}
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer m.DeleteSnapshot(ctx, snap.ID)
	dir := m.snapshotDir(snap.ID)

	fork := func(what string) string {
		t.Helper()
		start := time.Now()
		f, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Delete(ctx, f.ID) })
		if got := mainText(t, m, f.ID, "x + 1"); got != "42" {
			t.Fatalf("x + 1 = %s in the %s fork, want 42", got, what)
		}
		t.Logf("%s fork %s: create to its first result in %v", what, f.ID, time.Since(start).Round(time.Millisecond))
		return f.ID
	}
	fork("first")
	var rec *snapshot.WorkingSet
	for deadline := time.Now().Add(time.Minute); rec == nil && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if w, err := readWorkingSet(dir); err == nil && w != nil && len(w.Extents) > 0 {
			rec = w
		}
	}
	if rec == nil {
		t.Fatal("the first fork recorded no working set beside its snapshot")
	}
	t.Logf("recorded working set: %d extents, %d KiB of the %d MiB memory file", len(rec.Extents), rec.Bytes()>>10, rec.MemoryBytes>>20)

	second := fork("second")
	wantPrefetched(t, m, second, rec.Extents)
}

// wantPrefetched fails t unless sandbox id's VMM was handed want as its
// restore's prefetch and its log says it prefetched, and logs that line.
func wantPrefetched(t *testing.T, m *VMManager, id string, want []snapshot.Extent) {
	t.Helper()
	dir := m.sandboxDir(id)
	spec, err := control.ReadSpec(filepath.Join(dir, specFile))
	if err != nil || spec.Restore == nil || !reflect.DeepEqual(spec.Restore.Prefetch, want) {
		t.Fatalf("%s's restore %+v (%v), want the recorded working set", id, spec.Restore, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "vmm.log"))
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "prefetched the recorded working set") {
			t.Logf("VMM: %s", l)
			return
		}
	}
	t.Fatalf("%s's VMM log says no prefetch:\n%s", id, b)
}
