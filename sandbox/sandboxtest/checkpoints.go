package sandboxtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoints (time travel), by the VM manager's rules with no VM: a
// checkpoint is a copy of what the fake keeps of a sandbox's machine (its
// sessions' variables, its files, its execution count), so a restore
// brings a variable or an uploaded file back as a memory restore does.
// With EveryCell one is recorded after each cell that ran to its end (the
// interpreter kept) and each exec, and the result carries its number;
// Fail("Checkpoint", err) makes those fail too, the result then carrying
// checkpoint_error and the sandbox running on. Keep drops the oldest.
// A branch (Config.Checkpoint) starts with the checkpoint's state and its
// sandbox's machine and image, as a fork does. A sandbox's first
// checkpoint is a whole image (its memory's size, depth 1); later ones
// are layers of a page per variable and file plus the files' bytes.

// checkpoint is one kept checkpoint and the state it restores.
type checkpoint struct {
	info         sandbox.CheckpointInfo
	sessions     sessions
	files        map[string][]byte
	cells        int
	contextsMade int
}

// checkpointsOf refuses a sandbox created without checkpoints; the
// caller holds m.mu.
func checkpointsOf(b *box) (sandbox.CheckpointConfig, error) {
	if b.info.Config.Checkpoints == nil {
		return sandbox.CheckpointConfig{}, fmt.Errorf("%w: sandbox %s was created without checkpoints; create it with \"checkpoints\": {...}",
			sandbox.ErrInvalid, b.info.ID)
	}
	return b.info.Config.Checkpoints.WithDefaults(), nil
}

// record records a checkpoint of b after what kind did (code: the cell's
// code or the exec's argv joined by NULs). The caller holds m.mu.
func (m *Manager) record(b *box, kind, code string) (sandbox.CheckpointInfo, error) {
	cc, err := checkpointsOf(b)
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if err := m.fail["Checkpoint"]; err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	n := 1
	if k := len(b.checkpoints); k > 0 {
		n = b.checkpoints[k-1].info.N + 1
	}
	m.checkpointsMade++
	cp := &checkpoint{
		info: sandbox.CheckpointInfo{N: n, Kind: kind, ExecutionCount: b.info.Cells,
			CreatedAt: epoch.Add(time.Duration(m.checkpointsMade) * time.Minute), PauseMS: 1},
		sessions: b.sessions.clone(), files: maps.Clone(b.files), cells: b.info.Cells, contextsMade: b.contextsMade,
	}
	if kind != sandbox.CheckpointManual {
		sum := sha256.Sum256([]byte(code))
		cp.info.CodeSHA256 = hex.EncodeToString(sum[:])
	}
	b.checkpoints = append(b.checkpoints, cp)
	if drop := len(b.checkpoints) - cc.Keep; drop > 0 {
		b.checkpoints = append([]*checkpoint(nil), b.checkpoints[drop:]...)
	}
	b.sizeCheckpoints()
	m.note("checkpoint %s %d %s", b.info.ID, n, kind)
	return cp.info, nil
}

// sizeCheckpoints gives b's checkpoints their depth and size: the oldest
// is the base, a whole image; each later one a layer over it.
func (b *box) sizeCheckpoints() {
	for i, cp := range b.checkpoints {
		cp.info.Depth = i + 1
		if i == 0 {
			cp.info.SizeBytes = int64(b.info.Config.MemoryMiB) << 20
			continue
		}
		size := int64(4096)
		for _, s := range cp.sessions {
			size += int64(len(s.vars)) * 4096
		}
		for _, f := range cp.files {
			size += 4096 + int64(len(f))
		}
		cp.info.SizeBytes = size
	}
}

// afterCell records b's checkpoint after a cell or exec when it has
// every-cell checkpoints, and returns what its result carries: the
// checkpoint's number, or why none was recorded. The caller holds m.mu.
func (m *Manager) afterCell(b *box, kind, code string) (int, string) {
	if cc := b.info.Config.Checkpoints; cc == nil || !cc.EveryCell || b.info.State == sandbox.StateLost {
		return 0, ""
	}
	info, err := m.record(b, kind, code)
	if err != nil {
		m.note("checkpoint %s failed: %v", b.info.ID, err)
		return 0, err.Error()
	}
	return info.N, ""
}

// execCode is what an exec's checkpoint digests: its argv joined by NULs.
func execCode(argv []string) string { return strings.Join(argv, "\x00") }

// between returns usable sandbox id with checkpoints, with no cell
// running; the caller holds m.mu.
func (m *Manager) between(id, what string) (*box, error) {
	b, err := m.usable(id)
	if err != nil {
		return nil, err
	}
	if _, err := checkpointsOf(b); err != nil {
		return nil, err
	}
	if b.info.CellRunning {
		return nil, fmt.Errorf("%w: a cell is running in sandbox %s; %s between cells", sandbox.ErrBusy, id, what)
	}
	return b, nil
}

func (m *Manager) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	if err := m.enterLocked("Checkpoint", id); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	defer m.mu.Unlock()
	b, err := m.between(id, "checkpoint it")
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	return m.record(b, sandbox.CheckpointManual, "")
}

func (m *Manager) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	if err := m.enterLocked("Checkpoints", id); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	b, err := m.find(id)
	if err != nil {
		return nil, err
	}
	if _, err := checkpointsOf(b); err != nil {
		return nil, err
	}
	out := make([]sandbox.CheckpointInfo, 0, len(b.checkpoints))
	for _, cp := range b.checkpoints {
		out = append(out, cp.info)
	}
	return out, nil
}

// kept finds checkpoint n of b; the caller holds m.mu.
func kept(b *box, n int) (int, error) {
	for i, cp := range b.checkpoints {
		if cp.info.N == n {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w: sandbox %s keeps no checkpoint %d", sandbox.ErrNotFound, b.info.ID, n)
}

// restore brings b back to its i-th kept checkpoint and drops the later
// ones; the caller holds m.mu.
func (m *Manager) restore(b *box, i int) sandbox.CheckpointInfo {
	cp := b.checkpoints[i]
	b.sessions, b.files = cp.sessions.clone(), maps.Clone(cp.files)
	b.info.Cells, b.contextsMade = cp.cells, cp.contextsMade
	b.checkpoints = b.checkpoints[:i+1]
	m.note("restore %s checkpoint %d", b.info.ID, cp.info.N)
	return cp.info
}

func (m *Manager) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	if err := m.enterLocked("RestoreCheckpoint", id, fmt.Sprint(n)); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	defer m.mu.Unlock()
	b, err := m.between(id, "restore it")
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	i, err := kept(b, n)
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	return m.restore(b, i), nil
}

func (m *Manager) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	if err := m.enterLocked("Undo", id); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	defer m.mu.Unlock()
	b, err := m.between(id, "undo")
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if len(b.checkpoints) < 2 {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s keeps %d checkpoints; undo needs the one before the last",
			sandbox.ErrNotFound, id, len(b.checkpoints))
	}
	return m.restore(b, len(b.checkpoints)-2), nil
}

// branchConfig gives a branch its checkpoint's sandbox's machine and
// image (a different one is refused) and, when it sets none, that
// sandbox's env, as forkConfig does for a fork. Another tenant's sandbox
// is not found. The caller holds m.mu.
func (m *Manager) branchConfig(cfg sandbox.Config) (sandbox.Config, *checkpoint, error) {
	ref := cfg.Checkpoint
	if err := ref.Validate(); err != nil {
		return cfg, nil, err
	}
	parent, ok := m.boxes[ref.Sandbox]
	if !ok || sandbox.Owner(parent.info.Config.Tenant) != sandbox.Owner(cfg.Tenant) {
		return cfg, nil, fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, ref.Sandbox)
	}
	if _, err := checkpointsOf(parent); err != nil {
		return cfg, nil, err
	}
	i, err := kept(parent, ref.N)
	if err != nil {
		return cfg, nil, err
	}
	pc := parent.info.Config
	if cfg.VCPUs != 0 && cfg.VCPUs != pc.VCPUs || cfg.MemoryMiB != 0 && cfg.MemoryMiB != pc.MemoryMiB {
		return cfg, nil, fmt.Errorf("%w: vcpus %d, memory_mib %d: a branch of %s has its %d vCPUs and %d MiB",
			sandbox.ErrInvalid, cfg.VCPUs, cfg.MemoryMiB, ref.Sandbox, pc.VCPUs, pc.MemoryMiB)
	}
	if cfg.Image != "" && imageOf(cfg) != imageOf(pc) {
		return cfg, nil, fmt.Errorf("%w: image %q: a branch of %s has its image (%q)", sandbox.ErrInvalid, cfg.Image, ref.Sandbox, imageOf(pc))
	}
	cfg.VCPUs, cfg.MemoryMiB, cfg.Image = pc.VCPUs, pc.MemoryMiB, pc.Image
	if cfg.Env == nil {
		cfg.Env = pc.Env
	}
	return cfg, parent.checkpoints[i], nil
}
