package engine

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// TestTemplateRecordsItsWorkingSet: a template build restores its
// snapshot once, asks that VMM for its guest's working set and keeps it
// beside the snapshot, tied to its memory file; a create from the
// template hands it to its VMM to prefetch, and leaves no build
// directory behind.
func TestTemplateRecordsItsWorkingSet(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_WSET", "1")
	m, state, _ := newTemplateManager(t, nil)
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	dir := filepath.Join(state, "templates", tpl.Key)
	ws, err := readWorkingSet(dir)
	if err != nil || ws == nil {
		t.Fatalf("the template's working set: %+v, %v", ws, err)
	}
	if !reflect.DeepEqual(ws.Extents, fakeWorkingSet) || ws.MemoryBytes != 2*4096 {
		t.Fatalf("recorded %+v, want the guest's %+v over 2 pages", ws, fakeWorkingSet)
	}
	info := createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)
	spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(info.ID), specFile))
	if err != nil {
		t.Fatal(err)
	}
	if spec.Restore == nil || !reflect.DeepEqual(spec.Restore.Prefetch, fakeWorkingSet) {
		t.Fatalf("a create from the template restores with %+v, want prefetch %+v", spec.Restore, fakeWorkingSet)
	}
	// The first fork of a user's snapshot has no record yet: nothing to
	// prefetch (forkwset_test.go follows it further).
	parent := createFrom(t, m, sandbox.Config{Start: sandbox.StartCold}, sandbox.StartedFromBoot)
	snap, err := m.Snapshot(context.Background(), parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	fork := createFrom(t, m, sandbox.Config{Snapshot: snap.ID}, sandbox.StartedFromSnapshot)
	spec, err = control.ReadSpec(filepath.Join(m.sandboxDir(fork.ID), specFile))
	if err != nil || spec.Restore == nil || spec.Restore.Prefetch != nil {
		t.Fatalf("a fork's restore: %+v (%v), want no prefetch", spec.Restore, err)
	}
	if d, _ := filepath.Glob(filepath.Join(state, "templates", templateBuildPref+"*")); len(d) != 0 {
		t.Errorf("template build directories left: %v", d)
	}
}

// A VMM that records no working set leaves its template without one, and
// the template is still built and used (TestTemplateStartsAPlainCreate's
// fake VMM has none).
func TestTemplateWithoutWorkingSet(t *testing.T) {
	m, state, _ := newTemplateManager(t, nil)
	tpl := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	if _, err := os.Stat(filepath.Join(state, "templates", tpl.Key, workingSetFile)); !os.IsNotExist(err) {
		t.Fatalf("a working set file for a VMM that recorded none: %v", err)
	}
	info := createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate)
	spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(info.ID), specFile))
	if err != nil || spec.Restore == nil || spec.Restore.Prefetch != nil {
		t.Fatalf("restore %+v (%v), want no prefetch", spec.Restore, err)
	}
}

// A record is refused when it is not its memory file's, damaged, or (as
// the VMM answered it) outside the memory; a refused answer leaves no
// file.
func TestWorkingSetRecordChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(snapStateFile, []byte(fakeVMState))
	write(snapMemFile, make([]byte, 4*4096))
	if ws, err := readWorkingSet(dir); ws != nil || err != nil {
		t.Fatalf("none recorded: %+v, %v", ws, err)
	}
	if _, err := writeWorkingSet(dir, []snapshot.Extent{{Off: 4 * 4096, Len: 4096}}); err == nil {
		t.Fatal("an answer outside the memory was written")
	}
	if _, err := os.Stat(filepath.Join(dir, workingSetFile)); !os.IsNotExist(err) {
		t.Fatalf("a refused answer left a file: %v", err)
	}
	want := []snapshot.Extent{{Off: 0, Len: 4096}, {Off: 2 * 4096, Len: 2 * 4096}}
	if _, err := writeWorkingSet(dir, want); err != nil {
		t.Fatal(err)
	}
	if ws, err := readWorkingSet(dir); err != nil || !reflect.DeepEqual(ws.Extents, want) {
		t.Fatalf("read back %+v, %v", ws, err)
	}
	// Another memory file (another size) under the same record.
	write(snapMemFile, make([]byte, 8*4096))
	if _, err := readWorkingSet(dir); err == nil {
		t.Fatal("a record for another memory file was read")
	}
	write(workingSetFile, []byte("{garbage"))
	if _, err := readWorkingSet(dir); err == nil {
		t.Fatal("a damaged record was read")
	}
}
