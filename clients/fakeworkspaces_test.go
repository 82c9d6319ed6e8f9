package clients

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// The fake manager's workspaces, by the VM manager's rules
// (sandbox/workspace.go) with no volume: a workspace is the files under
// /workspace/ of the sandbox that holds it, made on the first create that
// names it and kept when that sandbox is deleted, so the next sandbox with
// the name reads them. One sandbox at a time holds a workspace, from its
// create to its delete (paused or lost too); a second create asking for
// it is busy, and so is deleting it. A sandbox with a workspace always
// boots and cannot be snapshotted.

// fakeWorkspace is a workspace: its files, and the sandbox holding it.
type fakeWorkspace struct {
	info  sandbox.WorkspaceInfo // Sandbox is the holder, "" when none
	files map[string][]byte
}

// holdWorkspace finds or makes the workspace a create names, for sandbox
// id, refusing one another sandbox holds; "" is none. The caller holds
// f.mu and has validated the name.
func (f *fakeManager) holdWorkspace(name, id string) (*fakeWorkspace, error) {
	if name == "" {
		return nil, nil
	}
	ws := f.workspaces[name]
	if ws == nil {
		ws = &fakeWorkspace{info: sandbox.WorkspaceInfo{Name: name, SizeBytes: sandbox.DefaultWorkspaceBytes,
			CreatedAt: time.Unix(1700000000, 0).Add(time.Duration(f.next) * time.Second).UTC()},
			files: map[string][]byte{}}
		f.workspaces[name] = ws
		f.events = append(f.events, "make workspace "+name)
	} else if ws.info.Sandbox != "" {
		return nil, fmt.Errorf("%w: workspace %s is mounted by sandbox %s; one sandbox at a time can hold a workspace",
			sandbox.ErrBusy, name, ws.info.Sandbox)
	}
	ws.info.Sandbox = id
	return ws, nil
}

// releaseWorkspace ends b's hold on its workspace, if any; the caller
// holds f.mu.
func (f *fakeManager) releaseWorkspace(b *fakeBox) {
	if b.ws != nil {
		b.ws.info.Sandbox = ""
		b.ws = nil
	}
}

// filesAt is where the file at guestPath lives: in b's workspace for one
// under /workspace/ of a sandbox with a workspace, in b's own files else.
func (b *fakeBox) filesAt(guestPath string) map[string][]byte {
	if b.ws != nil && strings.HasPrefix(guestPath, "/workspace/") {
		return b.ws.files
	}
	return b.files
}

func (f *fakeManager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandbox.WorkspaceInfo{}
	for _, ws := range f.workspaces {
		info := ws.info
		for _, data := range ws.files {
			info.DiskBytes += int64(len(data))
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeManager) DeleteWorkspace(ctx context.Context, name string) error {
	if !sandbox.ValidWorkspaceName(name) {
		return fmt.Errorf("%w: workspace %q is not a workspace name", sandbox.ErrInvalid, name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ws := f.workspaces[name]
	switch {
	case ws == nil:
		return fmt.Errorf("%w: no workspace %s", sandbox.ErrNotFound, name)
	case ws.info.Sandbox != "":
		return fmt.Errorf("%w: workspace %s is held by sandbox %s; delete the sandbox first", sandbox.ErrBusy, name, ws.info.Sandbox)
	}
	delete(f.workspaces, name)
	f.events = append(f.events, "delete workspace "+name)
	return nil
}
