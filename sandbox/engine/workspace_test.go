package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// fakeGuestMountsWorkspace is what the fake VMM (fakePausableVMM) does with
// a workspace disk it was passed: it checks that the descriptor is an
// ext4 volume it can write, and counts its boots and restores in the
// file's last 8 bytes, so a test can tell which file each VM had.
func fakeGuestMountsWorkspace(spec control.Spec, files control.Files) error {
	for i, d := range spec.Disks {
		if !d.Passed {
			continue
		}
		if !strings.Contains(spec.Cmdline, "cellvm.workspace="+workspaceDisk) || i != 1 {
			return fmt.Errorf("disk %d passed open, command line %q", i, spec.Cmdline)
		}
		f := files[control.DiskSlot(i)]
		defer f.Close()
		magic := make([]byte, 2)
		if _, err := f.ReadAt(magic, 1024+56); err != nil || binary.LittleEndian.Uint16(magic) != 0xef53 {
			return fmt.Errorf("disk %d (%s) is not ext4: %x %v", i, d.Path, magic, err)
		}
		n, err := workspaceCount(f)
		if err != nil {
			return err
		}
		fi, _ := f.Stat()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], n+1)
		if _, err := f.WriteAt(b[:], fi.Size()-8); err != nil {
			return fmt.Errorf("write the workspace: %w", err)
		}
	}
	return nil
}

// workspaceCount reads fakeGuestMountsWorkspace's counter.
func workspaceCount(f *os.File) (uint64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	var b [8]byte
	if _, err := f.ReadAt(b[:], fi.Size()-8); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// TestWorkspaceHeldByOneSandbox, over fake VMMs: a workspace is made on
// first use (a sparse ext4 file of the configured size) and passed to the
// VMM open, as the second disk; a second sandbox asking for it, and a
// delete of it, are ErrBusy while a sandbox holds it, and a snapshot of
// that sandbox ErrNotSupported; the next sandbox with the same name gets
// the same file (its guest sees what the first one wrote), and so does
// the holder's resume after a pause; a deleted workspace is gone.
func TestWorkspaceHeldByOneSandbox(t *testing.T) {
	m, state := newPausableManager(t, func(o *Options) { o.WorkspaceBytes = 32 << 20 })
	ctx := context.Background()
	path := filepath.Join(state, "workspaces", "notes.ext4")
	count := func() uint64 {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		n, err := workspaceCount(f)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := m.Create(ctx, sandbox.Config{Workspace: "Notes/../x"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a bad workspace name: %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(filepath.Join(state, "workspaces")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused create made the workspaces directory: %v", err)
	}
	a, err := m.Create(ctx, sandbox.Config{Workspace: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 32<<20 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the workspace file: %v %v", fi, err)
	}
	if n := count(); n != 1 {
		t.Errorf("the first VM's count %d, want 1", n)
	}
	spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(a.ID), specFile))
	if err != nil || len(spec.Disks) != 2 || !spec.Disks[1].Passed || spec.Files[control.DiskSlot(1)] < 3 ||
		spec.Disks[1].ReadOnly || spec.Disks[1].Path != "workspace notes" {
		t.Errorf("the VMM's disks: %+v, files %v, %v; want the workspace, writable, passed in its slot", spec.Disks, spec.Files, err)
	}
	if !strings.Contains(spec.Cmdline, "cellvm.workspace=/dev/vdb") {
		t.Errorf("command line %q lacks cellvm.workspace", spec.Cmdline)
	}

	before, _ := os.ReadDir(filepath.Join(state, "sandboxes"))
	_, err = m.Create(ctx, sandbox.Config{Workspace: "notes"})
	if !errors.Is(err, sandbox.ErrBusy) || !strings.Contains(err.Error(), a.ID) {
		t.Errorf("a second sandbox for the same workspace: %v, want ErrBusy naming %s", err, a.ID)
	}
	if after, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(after) != len(before) {
		t.Errorf("the refused create left a sandbox directory: %d, then %d", len(before), len(after))
	}
	if err := m.DeleteWorkspace(ctx, "notes"); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("delete of a held workspace: %v, want ErrBusy", err)
	}
	if _, err := m.Snapshot(ctx, a.ID); !errors.Is(err, sandbox.ErrNotSupported) {
		t.Errorf("snapshot of a sandbox with a workspace: %v, want ErrNotSupported", err)
	}
	ws, err := m.Workspaces(ctx)
	if err != nil || len(ws) != 1 || ws[0].Name != "notes" || ws[0].Sandbox != a.ID || ws[0].SizeBytes != 32<<20 || ws[0].DiskBytes <= 0 || ws[0].DiskBytes >= 32<<20 {
		t.Errorf("Workspaces = %+v, %v; want notes, held by %s, sparse", ws, err, a.ID)
	}
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if ws, _ := m.Workspaces(ctx); len(ws) != 1 || ws[0].Sandbox != "" {
		t.Errorf("after its sandbox's delete: %+v, want notes, held by none", ws)
	}

	c, err := m.Create(ctx, sandbox.Config{Workspace: "notes"})
	if err != nil {
		t.Fatalf("the workspace once its sandbox is deleted: %v", err)
	}
	if n := count(); n != 2 {
		t.Errorf("the second sandbox's VM counted %d, want 2: it did not get the first one's file", n)
	}
	if err := m.Pause(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteWorkspace(ctx, "notes"); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("delete of a paused sandbox's workspace: %v, want ErrBusy", err)
	}
	if err := m.Resume(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Errorf("after a resume the count is %d, want 3: the resumed VM did not get the workspace", n)
	}
	if err := m.Delete(ctx, c.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteWorkspace(ctx, "notes"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted workspace's file: %v", err)
	}
	if err := m.DeleteWorkspace(ctx, "notes"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("second delete: %v, want ErrNotFound", err)
	}
	if ws, err := m.Workspaces(ctx); err != nil || len(ws) != 0 {
		t.Errorf("Workspaces after the delete: %+v %v", ws, err)
	}
}

func TestWorkspaceNames(t *testing.T) {
	for _, ok := range []string{"a", "notes", "conv-42", "a.b_c", strings.Repeat("x", sandbox.MaxWorkspaceName)} {
		if !sandbox.ValidWorkspaceName(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "-a", ".hidden", "A", "a/b", "..", "a b", "é", strings.Repeat("x", sandbox.MaxWorkspaceName+1)} {
		if sandbox.ValidWorkspaceName(bad) {
			t.Errorf("%q accepted", bad)
		}
		if err := (sandbox.Config{Workspace: bad}).WithDefaults().Validate(); bad != "" && !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Validate with workspace %q: %v", bad, err)
		}
	}
	if err := (sandbox.Config{Workspace: "notes", Snapshot: "snap-0123456789ab"}).WithDefaults().Validate(); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a fork with a workspace: %v, want ErrInvalid", err)
	}
}

// TestWorkspaceCap: with MaxWorkspaces 1, a create that would make a second
// workspace is ErrFull and leaves no file or sandbox, while the existing
// workspace can still be used.
func TestWorkspaceCap(t *testing.T) {
	m, state := newPausableManager(t, func(o *Options) { o.WorkspaceBytes = 16 << 20; o.MaxWorkspaces = 1 })
	ctx := context.Background()
	a, err := m.Create(ctx, sandbox.Config{Workspace: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Workspace: "two"}); !errors.Is(err, sandbox.ErrFull) || !strings.Contains(err.Error(), "--max-workspaces") {
		t.Errorf("a second workspace past the cap: %v, want ErrFull naming --max-workspaces", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "workspaces")); len(ents) != 1 || ents[0].Name() != "one.ext4" {
		t.Errorf("the workspaces directory after the refusal: %v", ents)
	}
	if list, _ := m.List(ctx); len(list) != 0 {
		t.Errorf("the refused create left %d sandboxes", len(list))
	}
	b, err := m.Create(ctx, sandbox.Config{Workspace: "one"})
	if err != nil {
		t.Fatalf("the existing workspace at the cap: %v", err)
	}
	if err := m.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
}
