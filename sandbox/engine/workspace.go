package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// A workspace is a named ext4 volume that outlives the sandboxes that use
// it: Config.Workspace mounts it at /workspace in place of the directory
// of the sandbox's own writable layer, so a conversation keeps its files
// across a deleted sandbox or a restarted daemon.
//
// On the host a workspace is one sparse file, StateDir/workspaces/NAME.ext4
// for DefaultTenant's and StateDir/workspaces/TENANT~NAME.ext4 for another
// tenant's (names are per tenant, and neither name can hold a '~'),
// made by mkfs.ext4 on first use with Options.WorkspaceBytes as its size:
// the guest's file system cannot grow past it, and the host's disk holds
// only what was written. The host never mounts it (the guest wrote it, so
// it is hostile input to a kernel); only guests do.
//
// One running sandbox at a time: a sandbox holds its workspace from its
// reservation to the end of its deletion (after its VMM is gone), and
// reserve refuses a second with ErrBusy, naming the holder. A lost
// sandbox still holds it until it is deleted. A paused sandbox holds it
// too, and its resume passes the same file again.
//
// The daemon opens the file and passes the VMM the descriptor (as it does
// a TAP), so a jailed VMM needs no path to it. Snapshots of a sandbox with
// a workspace are refused: the volume is not part of the machine image, so
// a fork would see files the snapshot never had, and mount a volume another
// sandbox holds. For the same reason such sandboxes never start from a
// template (whose machine has no such disk) and always boot.
//
// A delete asks the guest to shut down first, so its page cache reaches the
// volume; ext4's journal covers a VM that ends without that (a kill).

// workspaceDisk is the guest's device for a workspace: the second disk,
// after the root image.
const workspaceDisk = "/dev/vdb"

// MaxWorkspaceBytes bounds Options.WorkspaceBytes: a jailed VMM cannot
// write a file past its RLIMIT_FSIZE.
const MaxWorkspaceBytes = jailFSize

func (m *VMManager) workspacesDir() string { return filepath.Join(m.opt.StateDir, "workspaces") }

func (m *VMManager) workspacePath(tenant, name string) string {
	return filepath.Join(m.workspacesDir(), workspaceFile(tenant, name))
}

// workspaceFile is the file name of tenant's workspace name.
func workspaceFile(tenant, name string) string {
	if t := sandbox.Owner(tenant); t != sandbox.DefaultTenant {
		return t + "~" + name + ".ext4"
	}
	return name + ".ext4"
}

// parseWorkspaceFile is workspaceFile's inverse; ok is false for a file
// that is not a workspace (a partial one, or not ours).
func parseWorkspaceFile(file string) (tenant, name string, ok bool) {
	base, ok := strings.CutSuffix(file, ".ext4")
	if !ok {
		return "", "", false
	}
	tenant, name, found := strings.Cut(base, "~")
	if !found {
		tenant, name = sandbox.DefaultTenant, base
	} else if !sandbox.ValidTenantName(tenant) || tenant == sandbox.DefaultTenant {
		return "", "", false
	}
	return tenant, name, sandbox.ValidWorkspaceName(name)
}

// holds reports whether s's config names tenant's workspace name.
func holds(cfg sandbox.Config, tenant, name string) bool {
	return cfg.Workspace == name && sandbox.Owner(cfg.Tenant) == sandbox.Owner(tenant)
}

func (m *VMManager) workspaceBytes() int64 {
	switch b := m.opt.WorkspaceBytes; {
	case b <= 0:
		return sandbox.DefaultWorkspaceBytes
	case b > MaxWorkspaceBytes:
		return MaxWorkspaceBytes
	default:
		return b
	}
}

// workspaceHolder is the sandbox other than self that holds tenant's
// workspace name, or nil. Caller holds m.mu.
func (m *VMManager) workspaceHolder(tenant, name string, self *vmSandbox) *vmSandbox {
	for _, s := range m.sandboxes {
		if s != self && holds(s.cfg, tenant, name) {
			return s
		}
	}
	return nil
}

// openWorkspace opens workspace name for its sandbox's VMM, making it
// first if it does not exist and create is set (a resume's guest has it
// mounted already: an empty one in its place would be corrupted). The
// caller holds the workspace (its sandbox is reserved), so nothing else
// makes, deletes or mounts it meanwhile.
func (m *VMManager) openWorkspace(ctx context.Context, tenant, name string, create bool) (*os.File, error) {
	path := m.workspacePath(tenant, name)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := m.makeWorkspace(ctx, tenant, name); err != nil {
			return nil, err
		}
		f, err = os.OpenFile(path, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("workspace %s: %s is not a regular file", name, path)
	}
	return f, nil
}

// makeWorkspace makes workspace name's volume: a sparse file of the
// configured size with an empty ext4 on it, written beside its final name
// and renamed into place, so a failed make leaves nothing.
func (m *VMManager) makeWorkspace(ctx context.Context, tenant, name string) error {
	if err := os.MkdirAll(m.workspacesDir(), 0o700); err != nil {
		return fmt.Errorf("workspace %s: %w", name, err)
	}
	if max := m.opt.MaxWorkspaces; max > 0 {
		if n := m.countWorkspaces(); n >= max {
			return fmt.Errorf("%w: there are %d workspaces, the cap is %d (serve --max-workspaces); delete one (cellvm workspace rm)", sandbox.ErrFull, n, max)
		}
	}
	size := m.workspaceBytes()
	tmp := m.workspacePath(tenant, name) + partialSuffix
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", name, err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// No reserved blocks (one user), a label to tell it by, and
		// the inode tables and journal zeroed lazily by the guest's
		// kernel, so making even a large one takes a moment.
		cmd := exec.CommandContext(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-L", "workspace",
			"-E", "lazy_itable_init=1,lazy_journal_init=1", tmp)
		if out, merr := cmd.CombinedOutput(); merr != nil {
			err = fmt.Errorf("mkfs.ext4: %v: %s (is e2fsprogs installed?)", merr, strings.TrimSpace(string(out)))
		}
	}
	if err == nil {
		err = os.Rename(tmp, m.workspacePath(tenant, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("make workspace %s: %w", name, err)
	}
	m.log.Info("workspace made", "name", name, "tenant", sandbox.Owner(tenant), "size_mib", size>>20)
	return nil
}

// countWorkspaces counts the workspaces on disk.
func (m *VMManager) countWorkspaces() int {
	ents, _ := os.ReadDir(m.workspacesDir())
	n := 0
	for _, e := range ents {
		if _, _, ok := parseWorkspaceFile(e.Name()); ok {
			n++
		}
	}
	return n
}

// Workspaces implements Manager.
func (m *VMManager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	ents, err := os.ReadDir(m.workspacesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return []sandbox.WorkspaceInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	m.mu.Lock()
	holders := map[string]string{} // by file name
	for _, s := range m.sandboxes {
		if s.cfg.Workspace != "" {
			holders[workspaceFile(s.cfg.Tenant, s.cfg.Workspace)] = s.id
		}
	}
	m.mu.Unlock()
	out := []sandbox.WorkspaceInfo{}
	for _, e := range ents {
		tenant, name, ok := parseWorkspaceFile(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue // a partial one, or not ours
		}
		fi, err := e.Info()
		if err != nil {
			continue // deleted meanwhile
		}
		w := sandbox.WorkspaceInfo{Name: name, Tenant: tenant, SizeBytes: fi.Size(), CreatedAt: fi.ModTime().UTC(), Sandbox: holders[e.Name()]}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			w.DiskBytes = st.Blocks * 512
			w.CreatedAt = time.Unix(st.Ctim.Sec, st.Ctim.Nsec).UTC()
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// DeleteWorkspace implements Manager: it removes the workspace of that
// name of the tenant ctx's caller acts for. A workspace a sandbox holds is
// ErrBusy.
func (m *VMManager) DeleteWorkspace(ctx context.Context, name string) error {
	if !sandbox.ValidWorkspaceName(name) {
		return fmt.Errorf("%w: workspace %q is not a workspace name", sandbox.ErrInvalid, clip(name, 64))
	}
	caller, _ := sandbox.CallerFrom(ctx)
	tenant := caller.Tenant
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.workspaceHolder(tenant, name, nil); s != nil {
		return fmt.Errorf("%w: workspace %s is held by sandbox %s; delete the sandbox first", sandbox.ErrBusy, name, s.id)
	}
	err := os.Remove(m.workspacePath(tenant, name))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: no workspace %s", sandbox.ErrNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("delete workspace %s: %w", name, err)
	}
	m.log.Info("workspace deleted", "name", name, "tenant", sandbox.Owner(tenant))
	return nil
}
