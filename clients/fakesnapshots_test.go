package clients

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// The fake manager's pause, resume, snapshots and forks, by the VM
// manager's rules (sandbox/pause.go, sandbox/snapshot.go) with no VM: a
// snapshot is a copy of the sandbox's variables and files, which its forks
// start with; a paused sandbox keeps them, and a cell, command or file
// call resumes it. Snapshots and paused sandboxes count their memory_mib
// against a disk cap of fakeDiskCapMiB (past it: full), so a sandbox of
// 6000 MiB cannot be snapshotted or paused.

// fakeDiskCapMiB is the fake's cap on snapshots and paused sandboxes.
const fakeDiskCapMiB = 4096

// fakeSnap is a snapshot: its sandbox's config, variables and files then.
type fakeSnap struct {
	info  sandbox.SnapshotInfo
	cfg   sandbox.Config
	vars  map[string]int
	files map[string][]byte
}

// copyState returns copies of the snapshot's variables and files, for a fork.
func (s *fakeSnap) copyState() (map[string]int, map[string][]byte) {
	return maps.Clone(s.vars), maps.Clone(s.files)
}

// startedFrom is how a sandbox of cfg starts in the fake: a fork from
// its snapshot, a cold start or one with a workspace (a template's machine
// has no workspace disk) by booting, anything else from the template.
func startedFrom(cfg sandbox.Config) string {
	switch {
	case cfg.Snapshot != "":
		return sandbox.StartedFromSnapshot
	case cfg.Start == sandbox.StartCold, cfg.Workspace != "":
		return sandbox.StartedFromBoot
	}
	return sandbox.StartedFromTemplate
}

// forkConfig gives a fork its snapshot's machine and image (a different
// one is refused) and what it does not set itself (env, lifetimes) from the
// snapshot's sandbox; the caller holds f.mu.
func (f *fakeManager) forkConfig(cfg sandbox.Config) (sandbox.Config, *fakeSnap, error) {
	sn, err := f.snap(cfg.Snapshot)
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
	if cfg.TTL == 0 {
		cfg.TTL = sn.cfg.TTL
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = sn.cfg.IdleTimeout
	}
	return cfg, sn, nil
}

// snap finds a snapshot; the caller holds f.mu.
func (f *fakeManager) snap(id string) (*fakeSnap, error) {
	if !sandbox.ValidSnapshotID(id) {
		return nil, fmt.Errorf("%w: %q is not a snapshot id (snap- and 12 hex digits)", sandbox.ErrInvalid, id)
	}
	sn, ok := f.snaps[id]
	if !ok {
		return nil, fmt.Errorf("%w: no snapshot %s", sandbox.ErrNotFound, id)
	}
	return sn, nil
}

// reserveDisk refuses what would take the disk past its cap; the caller
// holds f.mu.
func (f *fakeManager) reserveDisk(what, id string, mib int) error {
	used := 0
	for _, sn := range f.snaps {
		used += sn.info.MemoryMiB
	}
	for _, b := range f.boxes {
		if b.info.State == sandbox.StatePaused {
			used += b.info.Config.MemoryMiB
		}
	}
	if used+mib > fakeDiskCapMiB {
		return fmt.Errorf("%w: %s of %s: %d MiB more would pass the snapshot disk cap (%d of %d MiB used); delete snapshots or paused sandboxes",
			sandbox.ErrFull, what, id, mib, used, fakeDiskCapMiB)
	}
	return nil
}

func (f *fakeManager) Pause(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	switch {
	case !ok:
		return fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, id)
	case b.lost:
		return fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, id)
	case b.info.State == sandbox.StatePaused:
		return fmt.Errorf("%w: sandbox %s is already paused", sandbox.ErrBusy, id)
	case b.running:
		return fmt.Errorf("%w: a cell is running in sandbox %s; interrupt it or wait, then pause", sandbox.ErrBusy, id)
	}
	if err := f.reserveDisk("pause", id, b.info.Config.MemoryMiB); err != nil {
		return err
	}
	b.info.State = sandbox.StatePaused
	f.events = append(f.events, "pause "+id)
	return nil
}

func (f *fakeManager) Resume(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, id)
	}
	if st := b.info.State; b.lost || st != sandbox.StatePaused {
		if b.lost {
			st = sandbox.StateLost
		}
		return fmt.Errorf("%w: sandbox %s is %s, not paused", sandbox.ErrBusy, id, st)
	}
	b.info.State = sandbox.StateRunning
	f.events = append(f.events, "resume "+id)
	return nil
}

func (f *fakeManager) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if b.running {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: a cell is running in sandbox %s; snapshot it between cells", sandbox.ErrBusy, id)
	}
	if b.ws != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: sandbox %s mounts workspace %s, which a snapshot cannot hold",
			sandbox.ErrNotSupported, id, b.ws.info.Name)
	}
	cfg := b.info.Config
	if err := f.reserveDisk("snapshot", id, cfg.MemoryMiB); err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	f.next++
	sn := &fakeSnap{
		info: sandbox.SnapshotInfo{ID: fmt.Sprintf("snap-%012x", f.next), SandboxID: id,
			CreatedAt: time.Unix(1700000000, 0).Add(time.Duration(f.next) * time.Second).UTC(),
			SizeBytes: int64(cfg.MemoryMiB) << 19, VCPUs: cfg.VCPUs, MemoryMiB: cfg.MemoryMiB},
		cfg: cfg, vars: maps.Clone(b.vars), files: maps.Clone(b.files),
	}
	f.snaps[sn.info.ID] = sn
	f.events = append(f.events, "snapshot "+id+" "+sn.info.ID)
	return sn.info, nil
}

func (f *fakeManager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandbox.SnapshotInfo{}
	for _, sn := range f.snaps {
		out = append(out, sn.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

func (f *fakeManager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sn, err := f.snap(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return sn.info, nil
}

func (f *fakeManager) DeleteSnapshot(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.snap(id); err != nil {
		return err
	}
	delete(f.snaps, id)
	f.events = append(f.events, "delete snapshot "+id)
	return nil
}
