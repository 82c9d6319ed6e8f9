package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// wantAPIStatus fails t unless err is the API's error with that status.
func wantAPIStatus(t *testing.T, what string, err error, status int) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Status != status {
		t.Errorf("%s: %v; want HTTP %d", what, err, status)
	}
}

// TestWorkspaceOutlivesItsSandbox, through the API of a jailed daemon: a
// file a cell writes to a named workspace is there in a new sandbox with
// the same workspace after the first is deleted and the daemon restarted;
// the volume is an ext4 of
// the daemon's size at /workspace, owned by the cells' user; a second
// running sandbox asking for it gets 409 naming the holder, and so does a
// delete of the workspace while it is held; a snapshot of its sandbox is
// 501; deleted, it is gone from the list.
func TestWorkspaceOutlivesItsSandbox(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	flags := []string{"--network=false", "--workspace-mib", "64"}
	d := startDaemon(t, dir, flags...)
	defer func() { d.stop(t) }()
	c := api.NewClient(d.socket)
	ctx := context.Background()
	a, err := c.Create(ctx, sandbox.Config{Workspace: "conv-1"})
	if err != nil {
		t.Fatal(err)
	}
	r := mustCell(t, c, a.ID, `import os
mounts = [l.split()[:3] for l in open('/proc/mounts') if l.split()[1] == '/workspace']
with open('/workspace/notes.txt', 'w') as f:
    f.write('kept 42')
os.makedirs('/workspace/data/sub', exist_ok=True)
open('/workspace/data/sub/x.bin', 'wb').write(bytes(range(256)) * 4096)
(mounts, os.stat('/workspace').st_uid == os.getuid(), sorted(os.listdir('/workspace')))`, 2*time.Minute)
	t.Logf("in the first sandbox: %s %s", text(r), r.Stderr)
	if r.Status != cell.StatusOK || text(r) != "([['/dev/vdb', '/workspace', 'ext4']], True, ['data', 'notes.txt'])" {
		t.Errorf("the workspace in the first sandbox: %+v; want /dev/vdb as ext4 at /workspace, the cells' own, with only what the cell wrote", r)
	}
	r = mustCell(t, c, a.ID, "import os\nst = os.statvfs('/workspace')\nst.f_blocks * st.f_frsize // 2**20", time.Minute)
	if mib, err := strconv.Atoi(text(r)); err != nil || mib < 48 || mib > 64 {
		t.Errorf("the volume is %q MiB; want about --workspace-mib 64", text(r))
	}

	_, err = c.Create(ctx, sandbox.Config{Workspace: "conv-1"})
	wantAPIStatus(t, "a second sandbox for a held workspace", err, http.StatusConflict)
	if err == nil || !strings.Contains(err.Error(), a.ID) {
		t.Errorf("the refusal does not name the holder %s: %v", a.ID, err)
	}
	wantAPIStatus(t, "delete of a held workspace", c.DeleteWorkspace(ctx, "conv-1"), http.StatusConflict)
	_, err = c.Snapshot(ctx, a.ID)
	wantAPIStatus(t, "snapshot of a sandbox with a workspace", err, http.StatusNotImplemented)
	ws, err := c.Workspaces(ctx)
	if err != nil || len(ws) != 1 || ws[0].Name != "conv-1" || ws[0].Sandbox != a.ID || ws[0].SizeBytes != 64<<20 || ws[0].DiskBytes <= 0 || ws[0].DiskBytes >= 64<<20 {
		t.Errorf("GET /v1/workspaces: %+v %v; want conv-1, 64 MiB, sparse, held by %s", ws, err, a.ID)
	}
	if list, err := c.List(ctx); err != nil || len(list) != 1 {
		t.Errorf("after the refused create: %d sandboxes (%v), want 1", len(list), err)
	}
	if err := c.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	// The cell's 1 MiB may have been in the guest's page cache until
	// the delete: the guest's shutdown writes it out.
	if ws, err := c.Workspaces(ctx); err != nil || len(ws) != 1 || ws[0].Sandbox != "" || ws[0].DiskBytes < 1<<20 {
		t.Errorf("after the delete: %+v %v; want conv-1 held by none, with the cell's 1 MiB on disk", ws, err)
	}

	// And across a restart of the daemon.
	d.stop(t)
	os.Remove(d.socket)
	d = startDaemon(t, dir, flags...)
	c = api.NewClient(d.socket)
	b, err := c.Create(ctx, sandbox.Config{Workspace: "conv-1"})
	if err != nil {
		t.Fatalf("the workspace after its sandbox was deleted: %v", err)
	}
	r = mustCell(t, c, b.ID, "import hashlib\n(open('/workspace/notes.txt').read(), hashlib.sha256(open('/workspace/data/sub/x.bin', 'rb').read()).hexdigest()[:16])", 2*time.Minute)
	seq := make([]byte, 256)
	for i := range seq {
		seq[i] = byte(i)
	}
	sum := sha256.Sum256(bytes.Repeat(seq, 4096))
	if r.Status != cell.StatusOK || text(r) != "('kept 42', '"+hex.EncodeToString(sum[:])[:16]+"')" {
		t.Errorf("the files in the next sandbox with the workspace: %+v", r)
	}
	if err := c.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteWorkspace(ctx, "conv-1"); err != nil {
		t.Fatal(err)
	}
	wantAPIStatus(t, "delete of a deleted workspace", c.DeleteWorkspace(ctx, "conv-1"), http.StatusNotFound)
	if ws, err := c.Workspaces(ctx); err != nil || len(ws) != 0 {
		t.Errorf("workspaces after the delete: %+v %v", ws, err)
	}
}
