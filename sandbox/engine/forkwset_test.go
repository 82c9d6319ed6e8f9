package engine

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// TestForkRecordsItsSnapshotsWorkingSet: the first fork of a snapshot
// restores without a prefetch and, after its first cell's result, records
// what its guest touched beside the snapshot; the forks after it prefetch
// that and record nothing; a damaged record is not used, and the next
// fork replaces it.
func TestForkRecordsItsSnapshotsWorkingSet(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_WSET", "1")
	m, snap := snapshotOfBooted(t)
	ctx := context.Background()
	dir := m.snapshotDir(snap.ID)
	record := filepath.Join(dir, workingSetFile)
	prefetchOf := func(id string) []snapshot.Extent {
		t.Helper()
		spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(id), specFile))
		if err != nil || spec.Restore == nil {
			t.Fatalf("fork %s's spec: %+v, %v", id, spec, err)
		}
		return spec.Restore.Prefetch
	}
	recording := func(id string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.sandboxes[id].recordWorkingSet.Load() != nil
	}
	waitRecord := func() *snapshot.WorkingSet {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if ws, err := readWorkingSet(dir); err == nil && ws != nil {
				return ws
			}
		}
		t.Fatal("no working set recorded beside the snapshot after its fork's first result")
		return nil
	}

	// forkNoPrefetch creates a fork that must restore without a
	// prefetch, runs no cell in it, and returns its ID.
	forkNoPrefetch := func(why string) string {
		t.Helper()
		f, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Delete(ctx, f.ID) })
		if p := prefetchOf(f.ID); p != nil {
			t.Fatalf("a fork prefetches %+v %s", p, why)
		}
		return f.ID
	}
	firstResult := func(id string) {
		t.Helper()
		if _, err := m.RunCell(ctx, id, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil); err != nil {
			t.Fatal(err)
		}
	}

	first := forkNoPrefetch("with no record")
	if !recording(first) {
		t.Fatal("the first fork of a snapshot without a record is not to record one")
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Fatalf("a record before the fork's first result: %v", err)
	}
	firstResult(first)
	ws := waitRecord()
	if !reflect.DeepEqual(ws.Extents, fakeWorkingSet) || ws.MemoryBytes != 2*4096 {
		t.Fatalf("recorded %+v, want the guest's %+v over 2 pages", ws, fakeWorkingSet)
	}
	if recording(first) {
		t.Error("the fork still records after it has")
	}
	if tmp, _ := filepath.Glob(record + ".*"); len(tmp) != 0 {
		t.Errorf("temporary files left beside the record: %v", tmp)
	}

	second := createFrom(t, m, sandbox.Config{Snapshot: snap.ID}, sandbox.StartedFromSnapshot)
	if p := prefetchOf(second.ID); !reflect.DeepEqual(p, fakeWorkingSet) {
		t.Fatalf("a later fork prefetches %+v, want the record's %+v", p, fakeWorkingSet)
	}
	if recording(second.ID) {
		t.Error("a fork of a snapshot with a record records again")
	}

	if err := os.WriteFile(record, []byte("{garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	firstResult(forkNoPrefetch("from a damaged record"))
	if ws := waitRecord(); !reflect.DeepEqual(ws.Extents, fakeWorkingSet) {
		t.Fatalf("the damaged record was replaced by %+v", ws)
	}
}

// A fork whose VMM records nothing (the fake without
// CELLVM_TEST_FAKE_WSET) leaves its snapshot without a record, and its
// cells are not held up by it.
func TestForkWithoutWorkingSet(t *testing.T) {
	m, snap := snapshotOfBooted(t)
	ctx := context.Background()
	fork := createFrom(t, m, sandbox.Config{Snapshot: snap.ID}, sandbox.StartedFromSnapshot)
	if _, err := m.RunCell(ctx, fork.ID, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	ents, _ := os.ReadDir(m.snapshotDir(snap.ID))
	for _, e := range ents {
		if e.Name() != snapStateFile && e.Name() != snapMemFile && e.Name() != snapMetaFile {
			t.Errorf("the snapshot's directory has %s", e.Name())
		}
	}
}

// snapshotOfBooted is a fake manager and a snapshot of a booted sandbox.
func snapshotOfBooted(t *testing.T) (*VMManager, sandbox.SnapshotInfo) {
	t.Helper()
	m, _, _ := newRoleManager(t, "agent", nil)
	parent := createFrom(t, m, sandbox.Config{}, sandbox.StartedFromBoot)
	snap, err := m.Snapshot(context.Background(), parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	return m, snap
}
