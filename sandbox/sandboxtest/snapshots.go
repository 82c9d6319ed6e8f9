package sandboxtest

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Pause, resume, snapshots and forks, by the VM manager's rules with no
// VM: a snapshot is a copy of the sandbox's config, variables and files,
// which its forks start with; a paused sandbox keeps them, and a cell,
// command or file call resumes it. Snapshots and paused sandboxes count
// their memory against MaxDiskMiB.

// snap is a snapshot: its sandbox's config, variables and files then.
type snap struct {
	info     sandbox.SnapshotInfo
	cfg      sandbox.Config
	sessions sessions
	files    map[string][]byte
}

// copyState returns copies of the snapshot's variables and files, for a fork.
func (s *snap) copyState() (sessions, map[string][]byte) {
	return s.sessions.clone(), maps.Clone(s.files)
}

// startedFrom is how a sandbox of cfg starts: a fork from its snapshot (a
// branch from its checkpoint), a
// cold start or one with a workspace (a template's machine has no
// workspace disk) by booting, anything else from the template.
func startedFrom(cfg sandbox.Config) string {
	switch {
	case cfg.Snapshot != "", cfg.Checkpoint != nil:
		return sandbox.StartedFromSnapshot
	case cfg.Start == sandbox.StartCold, cfg.Workspace != "":
		return sandbox.StartedFromBoot
	}
	return sandbox.StartedFromTemplate
}

// forkConfig gives a fork its snapshot's machine and image (a different
// one is refused) and, when it sets none, the snapshot's sandbox's env;
// its lifetimes are its own or the defaults, as for any create. The
// caller holds m.mu.
func (m *Manager) forkConfig(cfg sandbox.Config) (sandbox.Config, *snap, error) {
	sn, err := m.snap(cfg.Snapshot)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.VCPUs != 0 && cfg.VCPUs != sn.info.VCPUs || cfg.MemoryMiB != 0 && cfg.MemoryMiB != sn.info.MemoryMiB {
		return cfg, nil, fmt.Errorf("%w: vcpus %d, memory_mib %d: a fork of %s has the snapshot's %d vCPUs and %d MiB",
			sandbox.ErrInvalid, cfg.VCPUs, cfg.MemoryMiB, sn.info.ID, sn.info.VCPUs, sn.info.MemoryMiB)
	}
	if cfg.Image != "" && imageOf(cfg) != imageOf(sn.cfg) {
		return cfg, nil, fmt.Errorf("%w: image %q: a fork of %s boots nothing; it has its snapshot's image (%q)",
			sandbox.ErrInvalid, cfg.Image, sn.info.ID, imageOf(sn.cfg))
	}
	cfg.VCPUs, cfg.MemoryMiB, cfg.Image = sn.info.VCPUs, sn.info.MemoryMiB, sn.cfg.Image
	if cfg.Env == nil {
		cfg.Env = sn.cfg.Env
	}
	return cfg, sn, nil
}

// snap finds a snapshot; the caller holds m.mu.
func (m *Manager) snap(id string) (*snap, error) {
	if !sandbox.ValidSnapshotID(id) {
		return nil, fmt.Errorf("%w: %q is not a snapshot id (snap- and 12 hex digits)", sandbox.ErrInvalid, id)
	}
	sn, ok := m.snaps[id]
	if !ok {
		return nil, fmt.Errorf("%w: no snapshot %s", sandbox.ErrNotFound, id)
	}
	return sn, nil
}

// reserveDisk refuses what would take the disk past MaxDiskMiB; the
// caller holds m.mu.
func (m *Manager) reserveDisk(what, id string, mib int) error {
	if m.MaxDiskMiB <= 0 {
		return nil
	}
	used := 0
	for _, sn := range m.snaps {
		used += sn.info.MemoryMiB
	}
	for _, b := range m.boxes {
		if b.info.State == sandbox.StatePaused {
			used += b.info.Config.MemoryMiB
		}
	}
	if used+mib > m.MaxDiskMiB {
		return fmt.Errorf("%w: %s of %s: %d MiB more would pass the snapshot disk cap (%d of %d MiB used); delete snapshots or paused sandboxes",
			sandbox.ErrFull, what, id, mib, used, m.MaxDiskMiB)
	}
	return nil
}

func (m *Manager) Pause(ctx context.Context, id string) error {
	if err := m.enterLocked("Pause", id); err != nil {
		return err
	}
	defer m.mu.Unlock()
	b, err := m.find(id)
	switch {
	case err != nil:
		return err
	case b.info.State == sandbox.StateLost:
		return fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, id)
	case b.info.State == sandbox.StatePaused:
		return fmt.Errorf("%w: sandbox %s is already paused", sandbox.ErrBusy, id)
	case b.info.CellRunning:
		return fmt.Errorf("%w: a cell is running in sandbox %s; interrupt it or wait, then pause", sandbox.ErrBusy, id)
	}
	if err := m.reserveDisk("pause", id, b.info.Config.MemoryMiB); err != nil {
		return err
	}
	b.info.State = sandbox.StatePaused
	m.note("pause %s", id)
	m.events.Publish(sandbox.Event{Type: sandbox.EventPaused, Sandbox: id, Tenant: b.info.Config.Tenant})
	return nil
}

func (m *Manager) Resume(ctx context.Context, id string) error {
	if err := m.enterLocked("Resume", id); err != nil {
		return err
	}
	defer m.mu.Unlock()
	b, err := m.find(id)
	if err != nil {
		return err
	}
	if st := b.info.State; st != sandbox.StatePaused {
		return fmt.Errorf("%w: sandbox %s is %s, not paused", sandbox.ErrBusy, id, st)
	}
	b.info.State = sandbox.StateRunning
	m.note("resume %s", id)
	m.events.Publish(sandbox.Event{Type: sandbox.EventResumed, Sandbox: id, Tenant: b.info.Config.Tenant})
	return nil
}

// Snapshot copies the sandbox's config, variables and files.
func (m *Manager) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	if err := m.enterLocked("Snapshot", id); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	defer m.mu.Unlock()
	b, err := m.usable(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if b.info.CellRunning {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: a cell is running in sandbox %s; snapshot it between cells", sandbox.ErrBusy, id)
	}
	if b.ws != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: sandbox %s mounts workspace %s, which a snapshot cannot hold",
			sandbox.ErrNotSupported, id, b.ws.info.Name)
	}
	cfg := b.info.Config
	if err := m.reserveDisk("snapshot", id, cfg.MemoryMiB); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	m.next++
	sn := &snap{
		info: sandbox.SnapshotInfo{ID: fmt.Sprintf("snap-%012x", m.next), SandboxID: id,
			CreatedAt: epoch.Add(time.Duration(m.next) * time.Second),
			SizeBytes: int64(cfg.MemoryMiB) << 19, VCPUs: cfg.VCPUs, MemoryMiB: cfg.MemoryMiB, Tenant: cfg.Tenant},
		cfg: cfg, sessions: b.sessions.clone(), files: maps.Clone(b.files),
	}
	m.snaps[sn.info.ID] = sn
	m.note("snapshot %s %s", id, sn.info.ID)
	return sn.info, nil
}

func (m *Manager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	if err := m.enterLocked("ListSnapshots"); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := []sandbox.SnapshotInfo{}
	for _, sn := range m.snaps {
		out = append(out, sn.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (m *Manager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	if err := m.enterLocked("GetSnapshot", id); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	defer m.mu.Unlock()
	sn, err := m.snap(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return sn.info, nil
}

func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if err := m.enterLocked("DeleteSnapshot", id); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if _, err := m.snap(id); err != nil {
		return err
	}
	delete(m.snaps, id)
	m.note("delete snapshot %s", id)
	return nil
}
