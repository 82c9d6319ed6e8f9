package sandboxtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Workspaces, by the VM manager's rules with no volume: a workspace is
// the files under /workspace/ of the sandbox that holds it, made on the
// first create that names it and kept when that sandbox is deleted, so
// the next sandbox with the name reads them. One sandbox at a time holds
// a workspace, from its create to its delete (paused or lost too); a
// second create asking for it is busy, and so is deleting it. A sandbox
// with a workspace always boots and cannot be snapshotted.

// wsKey names a workspace: names are per tenant.
type wsKey struct{ tenant, name string }

func keyOf(tenant, name string) wsKey { return wsKey{sandbox.Owner(tenant), name} }

// workspace is a workspace: its files, and the sandbox holding it.
type workspace struct {
	info  sandbox.WorkspaceInfo // Sandbox is the holder, "" when none
	files map[string][]byte
}

// holdWorkspace finds or makes the workspace a create names, for sandbox
// id, refusing one another sandbox holds; "" is none. The caller holds
// m.mu and has validated the name.
func (m *Manager) holdWorkspace(tenant, name, id string) (*workspace, error) {
	if name == "" {
		return nil, nil
	}
	ws := m.workspaces[keyOf(tenant, name)]
	if ws == nil {
		ws = &workspace{info: sandbox.WorkspaceInfo{Name: name, Tenant: sandbox.Owner(tenant), SizeBytes: sandbox.DefaultWorkspaceBytes,
			CreatedAt: epoch.Add(time.Duration(m.next) * time.Second)},
			files: map[string][]byte{}}
		m.workspaces[keyOf(tenant, name)] = ws
		m.note("make workspace %s", name)
	} else if ws.info.Sandbox != "" {
		return nil, fmt.Errorf("%w: workspace %s is mounted by sandbox %s; one sandbox at a time can hold a workspace",
			sandbox.ErrBusy, name, ws.info.Sandbox)
	}
	ws.info.Sandbox = id
	return ws, nil
}

// releaseWorkspace ends b's hold on its workspace, if any; the caller
// holds m.mu.
func (m *Manager) releaseWorkspace(b *box) {
	if b.ws != nil {
		b.ws.info.Sandbox = ""
		b.ws = nil
	}
}

// filesAt is where the file at guestPath lives: in b's workspace for one
// under /workspace/ of a sandbox with a workspace, in b's own files else.
func (b *box) filesAt(guestPath string) map[string][]byte {
	if b.ws != nil && strings.HasPrefix(guestPath, "/workspace/") {
		return b.ws.files
	}
	return b.files
}

func (m *Manager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	if err := m.enterLocked("Workspaces"); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := []sandbox.WorkspaceInfo{}
	for _, ws := range m.workspaces {
		info := ws.info
		for _, data := range ws.files {
			info.DiskBytes += int64(len(data))
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func (m *Manager) DeleteWorkspace(ctx context.Context, name string) error {
	if err := m.enterLocked("DeleteWorkspace", name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if !sandbox.ValidWorkspaceName(name) {
		return fmt.Errorf("%w: workspace %q is not a workspace name", sandbox.ErrInvalid, name)
	}
	caller, _ := sandbox.CallerFrom(ctx)
	key := keyOf(caller.Tenant, name)
	ws := m.workspaces[key]
	switch {
	case ws == nil:
		return fmt.Errorf("%w: no workspace %s", sandbox.ErrNotFound, name)
	case ws.info.Sandbox != "":
		return fmt.Errorf("%w: workspace %s is held by sandbox %s; delete the sandbox first", sandbox.ErrBusy, name, ws.info.Sandbox)
	}
	delete(m.workspaces, key)
	m.note("delete workspace %s", name)
	return nil
}
