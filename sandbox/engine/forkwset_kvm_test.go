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
	sdir := m.sandboxDir(second)
	spec, err := control.ReadSpec(filepath.Join(sdir, specFile))
	if err != nil || spec.Restore == nil || !reflect.DeepEqual(spec.Restore.Prefetch, rec.Extents) {
		t.Fatalf("the second fork's restore %+v (%v), want the recorded working set", spec.Restore, err)
	}
	b, _ := os.ReadFile(filepath.Join(sdir, "vmm.log"))
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "prefetched the recorded working set") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("the second fork's VMM log says no prefetch:\n%s", b)
	}
	t.Logf("VMM: %s", line)
}
