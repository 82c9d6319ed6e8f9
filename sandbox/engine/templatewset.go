package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A template's recorded working set (vmm/snapshot's workingset.go). A
// create restored from a template faults its memory file in a page at a
// time, in the order its guest reaches the pages, until its first cell's
// result; the pages are nearly the same every time. So a build, once its
// snapshot is written, restores it once, as a create would (a restore
// more per build: the booted build VM's anonymous memory says nothing
// about which of the file's pages a restore touches), runs a trivial
// cell, asks that VMM which pages its guest touched (control.WorkingSet:
// the page map) and keeps the answer beside the snapshot, tied to its
// memory file. A create from the template hands it to its VMM
// (control.Restore.Prefetch), which reads those ranges ahead before its
// first vCPU runs.
//
// The record is a hint throughout: a build whose recording fails keeps
// its template without one, and a record that is missing, damaged or not
// this memory file's is not used. The VMM's answer is input from a guest's
// process: it is bounded and validated before it is written.

// workingSetFile, in a template's directory, is its recorded working set.
const workingSetFile = "workingset.json"

// workingSetCell is the cell a recording restore runs: the first result
// a create waits for, and the bench's.
const workingSetCell = "1 + 1"

// recordWorkingSet restores the snapshot in dir once (a VM of shape),
// runs workingSetCell, and writes what the guest touched to dir's
// workingSetFile. It fails without leaving the file.
func (ts *templates) recordWorkingSet(ctx context.Context, shape templateShape, dir string) error {
	start := time.Now()
	cfg := sandbox.Config{VCPUs: shape.VCPUs, MemoryMiB: shape.MemoryMiB, Root: shape.Root, Image: shape.Image}
	ext, err := ts.host.recordWorkingSet(ctx, cfg, dir)
	if err != nil {
		return err
	}
	ws, err := writeWorkingSet(dir, ext)
	if err != nil {
		return err
	}
	ts.log.Info("template working set recorded", "shape", shape, "extents", len(ws.Extents), "bytes", ws.Bytes(),
		"took_ms", time.Since(start).Milliseconds())
	return nil
}

// writeWorkingSet writes ext, the working set of a restore of the
// snapshot in dir, to dir's workingSetFile, tied to the snapshot's memory
// file (memoryIdentity).
func writeWorkingSet(dir string, ext []snapshot.Extent) (*snapshot.WorkingSet, error) {
	sum, size, err := memoryIdentity(dir)
	if err != nil {
		return nil, err
	}
	ws := &snapshot.WorkingSet{MemorySum: sum, MemoryBytes: size, Extents: ext}
	var b bytes.Buffer
	if err := snapshot.EncodeWorkingSet(&b, ws); err != nil {
		return nil, fmt.Errorf("the VMM's answer: %w", err)
	}
	// Forks read a snapshot's record while another fork may write it
	// (forkwset.go): it is written aside and renamed into place whole.
	tmp, err := os.CreateTemp(dir, workingSetFile+".*")
	if err != nil {
		return nil, fmt.Errorf("working set: %w", err)
	}
	tmp.Close()
	if err := writeFileSync(tmp.Name(), b.Bytes(), 0o600); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("working set: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, workingSetFile)); err != nil {
		os.Remove(tmp.Name())
		return nil, fmt.Errorf("working set: %w", err)
	}
	return ws, nil
}

// readWorkingSet reads dir's recorded working set, and checks that it is
// for the memory file there. None recorded is (nil, nil).
func readWorkingSet(dir string) (*snapshot.WorkingSet, error) {
	f, err := os.Open(filepath.Join(dir, workingSetFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ws, err := snapshot.DecodeWorkingSet(f)
	if err != nil {
		return nil, err
	}
	sum, size, err := memoryIdentity(dir)
	if err != nil {
		return nil, err
	}
	if err := ws.For(sum, size); err != nil {
		return nil, err
	}
	return ws, nil
}

// memoryIdentity is what ties a record to the snapshot in dir: its
// memory file's sum (the state file header's; 0 when the header has
// none) and size.
func memoryIdentity(dir string) (sum uint32, size uint64, err error) {
	state, err := os.Open(filepath.Join(dir, snapStateFile))
	if err != nil {
		return 0, 0, err
	}
	defer state.Close()
	sum, _ = snapshot.MemorySum(state)
	fi, err := os.Stat(filepath.Join(dir, snapMemFile))
	if err != nil {
		return 0, 0, err
	}
	return sum, uint64(fi.Size()), nil
}

// prefetchLocked is the working set a create from t restores with: read
// once per build of t (its key) and kept; a bad record is logged once and
// not used.
func (ts *templates) prefetchLocked(t *template) []snapshot.Extent {
	if t.prefetchKey == t.key {
		return t.prefetch
	}
	t.prefetchKey, t.prefetch = t.key, nil
	ws, err := readWorkingSet(ts.templateDir(t.key))
	if err != nil {
		ts.log.Warn("template's recorded working set not used", "template", t.key, "error", clip(err.Error(), 512))
		return nil
	}
	if ws != nil {
		t.prefetch = ws.Extents
	}
	return t.prefetch
}

// recordWorkingSet is templateHost's: it restores the snapshot in dir as
// an internal VM of cfg, runs workingSetCell, and asks the VMM what its
// guest touched.
func (m *VMManager) recordWorkingSet(ctx context.Context, cfg sandbox.Config, dir string) ([]snapshot.Extent, error) {
	from := &restoreSource{dir: dir, name: "template build's snapshot", startedFrom: sandbox.StartedFromTemplate}
	s, err := m.launch(ctx, cfg, egress.Policy{}, from, &internalLaunch{dir: m.templates.buildDir, priority: true})
	if err != nil {
		return nil, fmt.Errorf("restore the template: %w", err)
	}
	defer m.destroy(s)
	if _, err := s.agent.RunCell(ctx, workingSetCell, time.Minute, nil); err != nil {
		return nil, fmt.Errorf("the restored template's first cell: %w", err)
	}
	ext, err := control.WorkingSet(ctx, hostControlPath(s.dir))
	if err != nil {
		return nil, err
	}
	return ext, nil
}
