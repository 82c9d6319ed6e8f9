package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/process"
)

// envPlans names a directory where fakePausableVMM records, for each VMM
// start, the machine its spec and files make (recordPlan).
const envPlans = "CELLVM_TEST_PLANS"

// planRecord is the machine a VMM would build (process.NewPlan), each
// passed file by its inode.
type planRecord struct {
	Kernel, Initrd   string
	VCPUs            int
	MemoryMiB        uint64
	Disks            []diskRecord
	CID              uint64
	UDS              string
	NIC              bool
	State, Memory    uint64 // the snapshot's files (0: it boots)
	End              uint64 // the End report's file
	CmdlineWorkspace bool   // the command line names the workspace disk
}

type diskRecord struct {
	Path     string
	ReadOnly bool
	File     uint64
}

// inode is f's inode number (0 for no file).
func inode(f *os.File) uint64 {
	if f == nil {
		return 0
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return ^uint64(0)
	}
	return st.Ino
}

func inodeOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// recordPlan is the fake VMM's record of the machine its spec and files
// would make, in envPlans as <sandbox id>.<n>.json.
func recordPlan(args []string, spec control.Spec, files control.Files) error {
	dir := os.Getenv(envPlans)
	if dir == "" {
		return nil
	}
	p, err := process.NewPlan(spec, files)
	if err != nil {
		return err
	}
	c := p.Config
	r := planRecord{Kernel: c.Kernel, Initrd: c.Initrd, VCPUs: c.VCPUs, MemoryMiB: c.MemoryMiB, NIC: c.TAP != nil,
		State: inode(p.State), Memory: inode(p.Memory), End: inode(files[control.SlotEnd]),
		CmdlineWorkspace: slices.Contains(strings.Fields(c.Cmdline), "cellvm.workspace="+workspaceDisk)}
	if c.Vsock != nil {
		r.CID, r.UDS = c.Vsock.CID, c.Vsock.UDS
	}
	for _, d := range c.Disks {
		r.Disks = append(r.Disks, diskRecord{d.Path, d.ReadOnly, inode(d.File)})
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	id := filepath.Base(filepath.Dir(args[len(args)-1]))
	for n := 0; ; n++ {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s.%d.json", id, n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		return errors.Join(err, f.Close())
	}
}

// TestDaemonSpecRoundTrip: the Specs the daemon builds for a boot (with a
// workspace), a resume of it, and a fork of a snapshot go through the
// launcher's slots, the VMM's command line and control.Load (the fake VMM
// parses them as the real one does) and make the machines they should:
// each passed file is the daemon's (the workspace, the paused image, the
// snapshot's files, the End report's file), each device where it belongs.
func TestDaemonSpecRoundTrip(t *testing.T) {
	plans := t.TempDir()
	t.Setenv(envPlans, plans)
	m, _ := newPausableManager(t, func(o *Options) { o.WorkspaceBytes = 32 << 20 })
	ctx := context.Background()
	plan := func(id string, n int) planRecord {
		t.Helper()
		var r planRecord
		b, err := os.ReadFile(filepath.Join(plans, fmt.Sprintf("%s.%d.json", id, n)))
		if err == nil {
			err = json.Unmarshal(b, &r)
		}
		if err != nil {
			t.Fatalf("sandbox %s's VMM #%d: %v", id, n, err)
		}
		return r
	}
	cid := func(id string) uint64 {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.sandboxes[id].cid
	}
	machine := func(id string, memMiB int) planRecord {
		dir := m.sandboxDir(id)
		return planRecord{Kernel: m.opt.Kernel, Initrd: m.opt.Initrd, VCPUs: 1, MemoryMiB: uint64(memMiB),
			Disks: []diskRecord{{Path: m.opt.RootFS, ReadOnly: true}},
			CID:   cid(id), UDS: filepath.Join(runDir(dir), vsockFile), End: inodeOf(t, filepath.Join(dir, endFile))}
	}

	a, err := m.Create(ctx, sandbox.Config{Workspace: "notes", MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	boot := machine(a.ID, 64)
	boot.Disks = append(boot.Disks, diskRecord{Path: "workspace notes", File: inodeOf(t, m.workspacePath("", "notes"))})
	boot.CmdlineWorkspace = true
	if got := plan(a.ID, 0); !reflect.DeepEqual(got, boot) {
		t.Errorf("boot:\n got %+v\nwant %+v", got, boot)
	}

	cellText(t, m, a.ID, "x = 1")
	if err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	resume := boot
	resume.State = inodeOf(t, filepath.Join(m.sandboxDir(a.ID), pausedDir, snapStateFile))
	resume.Memory = inodeOf(t, filepath.Join(m.sandboxDir(a.ID), pausedDir, snapMemFile))
	if err := m.Resume(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := plan(a.ID, 1); !reflect.DeepEqual(got, resume) {
		t.Errorf("resume:\n got %+v\nwant %+v", got, resume)
	}
	// Paused, it has no guest to wait for at the manager's Close (a
	// workspace's shutdown is waited for).
	if err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}

	b, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	fork := machine(f.ID, 64)
	fork.State = inodeOf(t, filepath.Join(m.snapshotDir(snap.ID), snapStateFile))
	fork.Memory = inodeOf(t, filepath.Join(m.snapshotDir(snap.ID), snapMemFile))
	if got := plan(f.ID, 0); !reflect.DeepEqual(got, fork) || got.CID == cid(b.ID) {
		t.Errorf("fork:\n got %+v\nwant %+v (its own CID, not its parent's %d)", got, fork, cid(b.ID))
	}
}
