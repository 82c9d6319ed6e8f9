package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Recording checkpoints: on request (Checkpoint), and after each cell or
// exec of a sandbox with EveryCell (everyCell). A failed record says why
// and changes nothing else: the sandbox runs on, and the next record asks
// the VMM for a whole image, so no page the failed one took out of the
// VMM's log is missed.

// checkpointTimeout bounds one record: a whole image is written at disk
// speed, a layer is what the cell touched.
const checkpointTimeout = snapshotTimeout

// initCheckpoints gives a launched sandbox of cfg its chain, and the
// files it was restored from (from, nil for a boot) as the base of its
// first layer when they are one whole image it can keep.
func (m *VMManager) initCheckpoints(s *vmSandbox, from *restoreSource) error {
	if s.cfg.Checkpoints == nil {
		return nil
	}
	dir := m.checkpointDir(s.id, s.dir)
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("checkpoint directory: %w", err)
	}
	c := newCkChain(dir, *s.cfg.Checkpoints, m.opt.CheckpointMaxBytes)
	s.ck = c
	if from == nil || imageChain(from.dir) != 0 {
		return nil // booted cold, or from a chain: a whole image first
	}
	if err := c.adoptBase(filepath.Join(from.dir, snapStateFile), filepath.Join(from.dir, snapMemFile)); err != nil {
		m.log.Info("a checkpointed sandbox's first checkpoint is a whole image: the files it was restored from cannot be kept", "id", s.id, "error", err)
	}
	return nil
}

// adoptBase links the whole image mem (whose state file, state, holds its
// sum, which the launch verified) into the chain's directory as the base
// of its first layer.
func (c *ckChain) adoptBase(state, mem string) error {
	sf, err := os.Open(state)
	if err != nil {
		return err
	}
	sum, err := snapshot.MemorySum(sf)
	sf.Close()
	if err != nil {
		return err
	}
	path := filepath.Join(c.dir, "base.mem")
	if err := os.Link(mem, path); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		os.Remove(path)
		return err
	}
	c.base = &ckFile{path: path, size: fi.Size(), crc: sum}
	c.full = false
	return nil
}

// everyCellOn reports whether s records a checkpoint after each cell.
func (s *vmSandbox) everyCellOn() bool { return s.ck != nil && s.ck.cfg.EveryCell }

// everyCell records the checkpoint after a completed cell or exec of a
// sandbox with EveryCell: its number, or why there is none.
func (m *VMManager) everyCell(ctx context.Context, s *vmSandbox, kind, code string) (int, string) {
	if !s.everyCellOn() {
		return 0, ""
	}
	info, err := m.recordCheckpoint(context.WithoutCancel(ctx), s, kind, code)
	if err != nil {
		m.log.Warn("checkpoint after a cell failed; the sandbox runs on", "id", s.id, "kind", kind, "error", err)
		return 0, clip(err.Error(), 1024)
	}
	return info.N, ""
}

// codeSum is CheckpointInfo.CodeSHA256 of a cell's code.
func codeSum(code string) string {
	h := sha256.Sum256([]byte(code))
	return hex.EncodeToString(h[:])
}

// argvSum is CheckpointInfo.CodeSHA256 of an exec's argv.
func argvSum(argv []string) string { return codeSum(strings.Join(argv, "\x00")) }

// Checkpoint implements sandbox.CheckpointManager.
func (m *VMManager) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	s, err := m.ready(id)
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if err := checkpointsOn(s); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if from, err := s.lc.move(evSnapshotStart); err != nil {
		if errors.Is(err, errCallsRunning) {
			return sandbox.CheckpointInfo{}, fmt.Errorf("%w: a command or a file transfer is running in sandbox %s; checkpoint it after", sandbox.ErrBusy, id)
		}
		if from == phaseCell || from == phaseSnapshotting {
			return sandbox.CheckpointInfo{}, fmt.Errorf("%w: a cell is running in sandbox %s; checkpoint it between cells", sandbox.ErrBusy, id)
		}
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrBusy, id, from.State())
	}
	s.cellDeadline.Store(time.Now().Add(checkpointTimeout).UnixNano())
	defer func() {
		s.lastUsed.Store(time.Now().UnixNano())
		s.lc.move(evSnapshotEnd)
	}()
	info, err := m.recordCheckpoint(ctx, s, sandbox.CheckpointManual, "")
	if err != nil && !s.proc.alive() {
		m.markLost(s)
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s's VM exited during the checkpoint", sandbox.ErrLost, id)
	}
	return info, err
}

// Checkpoints implements sandbox.CheckpointManager.
func (m *VMManager) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	if err := checkpointsOn(s); err != nil {
		return nil, err
	}
	s.ck.mu.Lock()
	defer s.ck.mu.Unlock()
	m.trim(ctx, id, s.ck) // what a background trim has yet to drop
	return s.ck.infos(), nil
}

// checkpointsOn is nil for a sandbox created with checkpoints.
func checkpointsOn(s *vmSandbox) error {
	if s.ck == nil {
		return fmt.Errorf("%w: sandbox %s was created without checkpoints (create it with \"checkpoints\")", sandbox.ErrInvalid, s.id)
	}
	return nil
}

// recordCheckpoint has s's VMM write a checkpoint and keeps it, then
// drops the oldest past the bounds (trim). The caller holds s busy (a
// cell, an exec, a manual checkpoint), so no restore runs meanwhile.
func (m *VMManager) recordCheckpoint(ctx context.Context, s *vmSandbox, kind, code string) (sandbox.CheckpointInfo, error) {
	c := s.ck
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s is being deleted", sandbox.ErrNotFound, s.id)
	}
	n := c.next
	tmpState := filepath.Join(c.dir, strconv.Itoa(n)+".partial.state")
	tmpMem := filepath.Join(c.dir, strconv.Itoa(n)+".partial.mem")
	kept := false
	defer func() {
		if !kept {
			os.Remove(tmpState)
			os.Remove(tmpMem)
			c.full = true
		}
	}()
	if c.resumed.Swap(false) {
		c.full = true
	}
	full := c.full || len(c.points) == 0 && c.base == nil
	stats, took, err := writeCheckpoint(ctx, hostControlPath(s.dir), tmpState, tmpMem, full)
	if err != nil {
		if errors.Is(err, control.CodeNoSpace) || errors.Is(err, syscall.ENOSPC) {
			return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoint of sandbox %s: the disk is full: %v", sandbox.ErrFull, s.id, err)
		}
		return sandbox.CheckpointInfo{}, fmt.Errorf("checkpoint of sandbox %s: %w", s.id, err)
	}
	mem, err := c.accept(tmpState, tmpMem, full)
	if err != nil {
		m.log.Warn("a checkpoint the VMM wrote was refused", "id", s.id, "error", err)
		return sandbox.CheckpointInfo{}, fmt.Errorf("checkpoint of sandbox %s: %w", s.id, err)
	}
	state := c.statePath(n)
	if err := os.Rename(tmpState, state); err != nil {
		return sandbox.CheckpointInfo{}, fmt.Errorf("checkpoint of sandbox %s: %w", s.id, err)
	}
	if err := os.Rename(tmpMem, c.memPath(n)); err != nil {
		os.Remove(state)
		return sandbox.CheckpointInfo{}, fmt.Errorf("checkpoint of sandbox %s: %w", s.id, err)
	}
	mem.path = c.memPath(n)
	pause := took.Milliseconds()
	if stats.PauseMS > 0 && stats.PauseMS <= pause {
		pause = stats.PauseMS // the VMM's own count, within what was seen
	}
	p := &ckPoint{state: state, mem: mem, info: sandbox.CheckpointInfo{
		N: n, Kind: kind, ExecutionCount: int(s.cells.Load()), CodeSHA256: code,
		CreatedAt: time.Now().UTC(), PauseMS: pause,
	}}
	c.points = append(c.points, p)
	c.next = n + 1
	c.full = false
	kept = true
	m.trimLater(s.id, c)
	i := len(c.points) - 1
	m.log.Debug("checkpoint recorded", "id", s.id, "n", n, "kind", kind, "whole", mem.whole(), "bytes", mem.size, "pause_ms", pause)
	return c.infoAt(i), nil
}

// writeCheckpoint asks the VMM on socket for a checkpoint into new files
// state and mem, within checkpointTimeout.
func writeCheckpoint(ctx context.Context, socket, state, mem string, full bool) (control.CheckpointStats, time.Duration, error) {
	sf, err := os.OpenFile(state, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return control.CheckpointStats{}, 0, err
	}
	defer sf.Close()
	mf, err := os.OpenFile(mem, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return control.CheckpointStats{}, 0, err
	}
	defer mf.Close()
	ctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	start := time.Now()
	stats, err := checkpointVMM(ctx, socket, sf, mf, full)
	return stats, time.Since(start), err
}

// checkpointVMM is control.Checkpoint; tests stand in a VMM of their own.
var checkpointVMM = control.Checkpoint

// accept checks the checkpoint the VMM wrote into state and mem against
// the chain and measures it: a whole image where one was asked for (full),
// a layer only over a kept checkpoint or base.
func (c *ckChain) accept(state, mem string, full bool) (ckFile, error) {
	fi, err := os.Stat(mem)
	if err != nil {
		return ckFile{}, err
	}
	cp, err := readCheckpointState(state, fi.Size())
	if err != nil {
		return ckFile{}, err
	}
	if cp.Layer && full {
		return ckFile{}, errors.New("the VMM wrote a layer where a whole image was asked for")
	}
	if cp.Layer && len(c.points) == 0 && c.base == nil {
		return ckFile{}, errors.New("the VMM wrote a layer with nothing kept under it")
	}
	if cp.Layer {
		if under := c.underImageSize(); under != cp.State.Machine.ImageSize() {
			return ckFile{}, fmt.Errorf("the VMM wrote a layer over a %d-byte image, the chain's is %d bytes", cp.State.Machine.ImageSize(), under)
		}
	}
	return measureCheckpoint(cp.State, mem, cp.Layer)
}

// underImageSize is the size of the whole image under the chain's newest
// checkpoint (or its base).
func (c *ckChain) underImageSize() int64 {
	if c.base != nil {
		return c.base.size
	}
	for _, p := range c.points {
		if p.mem.whole() {
			return p.mem.size
		}
	}
	return -1
}

// trimLater drops, in the background, the oldest checkpoints past the
// chain's bounds (trim): a drop may fold a whole image, which the cell
// whose checkpoint passed the bound does not wait for; the next record,
// restore or list waits for it (c.mu). The caller holds c.mu.
func (m *VMManager) trimLater(id string, c *ckChain) {
	if !c.over() {
		return
	}
	c.trims.Add(1)
	go func() {
		defer c.trims.Done()
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.closed {
			m.trim(c.trimCtx, id, c)
		}
	}()
}

// over reports whether the chain is past its bounds: Keep, the disk
// budget, or the files and extents a restore of the newest would compose.
func (c *ckChain) over() bool {
	if len(c.points) <= 1 {
		return false
	}
	files, extents, err := c.chainBounds(len(c.points) - 1)
	return len(c.points) > c.cfg.Keep ||
		c.maxBytes > 0 && c.bytes() > c.maxBytes ||
		err == nil && (files > maxCheckpointChain || extents > maxChainExtents)
}

// trim drops the oldest checkpoints while the chain is over its bounds.
// One that cannot be dropped is logged and kept. The caller holds c.mu.
func (m *VMManager) trim(ctx context.Context, id string, c *ckChain) {
	for c.over() {
		if err := c.dropOldest(ctx); err != nil {
			m.log.Warn("the oldest checkpoint could not be dropped", "id", id, "error", err)
			return
		}
	}
}
