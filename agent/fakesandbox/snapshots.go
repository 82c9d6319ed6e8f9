package fakesandbox

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// snap is a snapshot: its sandbox's variables at the time.
type snap struct {
	info sandbox.SnapshotInfo
	cfg  sandbox.Config
	vars map[string]int
}

// Snapshot implements sandbox.Manager: a copy of the sandbox's variables,
// which forks (Create with Config.Snapshot) start with.
func (m *Manager) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.get(id)
	if err == nil {
		err = m.usable(b)
	}
	if err == nil && b.ws != nil {
		err = fmt.Errorf("%w: sandbox %s mounts a workspace, which a snapshot cannot hold", sandbox.ErrNotSupported, id)
	}
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	m.next++
	sn := &snap{
		info: sandbox.SnapshotInfo{ID: fmt.Sprintf("snap-%012x", m.next), SandboxID: id, CreatedAt: time.Now().UTC(),
			SizeBytes: int64(b.info.Config.MemoryMiB) << 19, VCPUs: b.info.Config.VCPUs, MemoryMiB: b.info.Config.MemoryMiB},
		cfg: b.info.Config, vars: map[string]int{},
	}
	for k, v := range b.vars {
		sn.vars[k] = v
	}
	m.snaps[sn.info.ID] = sn
	return sn.info, nil
}

// getSnap finds a snapshot; the caller holds m.mu.
func (m *Manager) getSnap(id string) (*snap, error) {
	if !sandbox.ValidSnapshotID(id) {
		return nil, fmt.Errorf("%w: %q is not a snapshot id", sandbox.ErrInvalid, id)
	}
	sn, ok := m.snaps[id]
	if !ok {
		return nil, fmt.Errorf("%w: no snapshot %s", sandbox.ErrNotFound, id)
	}
	return sn, nil
}

// forkConfig is the VM manager's rule: a fork has its snapshot's machine.
// The caller holds m.mu.
func (m *Manager) forkConfig(cfg sandbox.Config) (sandbox.Config, *snap, error) {
	sn, err := m.getSnap(cfg.Snapshot)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.VCPUs != 0 && cfg.VCPUs != sn.info.VCPUs || cfg.MemoryMiB != 0 && cfg.MemoryMiB != sn.info.MemoryMiB {
		return cfg, nil, fmt.Errorf("%w: a fork of %s has the snapshot's %d vCPUs and %d MiB", sandbox.ErrInvalid, sn.info.ID, sn.info.VCPUs, sn.info.MemoryMiB)
	}
	cfg.VCPUs, cfg.MemoryMiB = sn.info.VCPUs, sn.info.MemoryMiB
	return cfg, sn, nil
}

func (m *Manager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []sandbox.SnapshotInfo{}
	for _, sn := range m.snaps {
		out = append(out, sn.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (m *Manager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sn, err := m.getSnap(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return sn.info, nil
}

func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.getSnap(id); err != nil {
		return err
	}
	delete(m.snaps, id)
	return nil
}
