package fakesandbox

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// workspace is a named volume: the files under /workspace of the box that
// holds it, kept when that box is deleted.
type workspace struct {
	created time.Time
	files   map[string][]byte
	holder  string // the box holding it; "" when none
}

// holdWorkspace finds or makes workspace name for a new box, refusing
// one another box holds, as the VM manager does. "" is none. The caller
// holds m.mu.
func (m *Manager) holdWorkspace(name string) (*workspace, error) {
	if name == "" {
		return nil, nil
	}
	ws := m.workspaces[name]
	if ws == nil {
		ws = &workspace{created: time.Now().UTC(), files: map[string][]byte{}}
		m.workspaces[name] = ws
	} else if ws.holder != "" {
		return nil, fmt.Errorf("%w: workspace %s is mounted by sandbox %s", sandbox.ErrBusy, name, ws.holder)
	}
	return ws, nil
}

// filesAt is where the file at guestPath lives: its workspace's files
// for one under /workspace of a box with a workspace, the box's own else.
func (b *box) filesAt(guestPath string) map[string][]byte {
	if b.ws != nil && strings.HasPrefix(guestPath, "/workspace/") {
		return b.ws.files
	}
	return b.files
}

// Workspaces implements sandbox.Manager.
func (m *Manager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []sandbox.WorkspaceInfo{}
	for name, ws := range m.workspaces {
		var n int64
		for _, f := range ws.files {
			n += int64(len(f))
		}
		out = append(out, sandbox.WorkspaceInfo{Name: name, SizeBytes: sandbox.DefaultWorkspaceBytes, DiskBytes: n, CreatedAt: ws.created, Sandbox: ws.holder})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Images implements sandbox.Manager: the fake has the default image only.
func (m *Manager) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return []sandbox.ImageInfo{{Name: sandbox.DefaultImage, Sandboxes: len(m.boxes)}}, nil
}

// DeleteImage implements sandbox.Manager: the fake has no image to
// delete.
func (m *Manager) DeleteImage(ctx context.Context, name string) error {
	if name == sandbox.DefaultImage {
		return fmt.Errorf("%w: the default image is the daemon's own", sandbox.ErrInvalid)
	}
	return fmt.Errorf("%w: no image %s", sandbox.ErrNotFound, name)
}

// DeleteWorkspace implements sandbox.Manager.
func (m *Manager) DeleteWorkspace(ctx context.Context, name string) error {
	if !sandbox.ValidWorkspaceName(name) {
		return fmt.Errorf("%w: %q is not a workspace name", sandbox.ErrInvalid, name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ws := m.workspaces[name]
	switch {
	case ws == nil:
		return fmt.Errorf("%w: no workspace %s", sandbox.ErrNotFound, name)
	case ws.holder != "":
		return fmt.Errorf("%w: workspace %s is held by sandbox %s", sandbox.ErrBusy, name, ws.holder)
	}
	delete(m.workspaces, name)
	return nil
}
