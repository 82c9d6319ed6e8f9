package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Going back to a checkpoint. Both ways compose the checkpoint's chain
// into an image directory as a pause or a snapshot leaves one (vm.state,
// vm.mem and the layer.N under it, pausechain.go), hard links to the
// chain's files where they can be, so the VMM that restores it checks and
// maps them as it does any image:
//
//   - RestoreCheckpoint (and Undo) stop the sandbox's VMM and resume it
//     from that image as a resume does (pause.go: same id, CID, network,
//     TAP, jail), and drop the checkpoints after it; the next checkpoint
//     is a layer over it.
//   - A branch (Create with Config.Checkpoint) restores it as a fork of a
//     snapshot does (snapshot.go): fresh entropy, clock, identity and
//     network. Its image directory goes once its VMM holds the files, and
//     its own checkpoints and pauses never layer over its parent's files.

// composeInto writes into dir the image of checkpoint points[i].
func (c *ckChain) composeInto(i int, dir string) error {
	chain, err := c.chain(i)
	if err != nil {
		return err
	}
	cp, err := readCheckpointState(c.points[i].state, c.points[i].mem.size)
	if err != nil {
		return err
	}
	b, err := composeState(cp, chain)
	if err != nil {
		return err
	}
	if err := writeSynced(filepath.Join(dir, snapStateFile), b); err != nil {
		return err
	}
	for j, f := range chain {
		name := snapMemFile
		if j < len(chain)-1 {
			name = chainFile(j)
		}
		if err := linkOrCopy(f.path, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("compose checkpoint %d: %w", c.points[i].info.N, err)
		}
	}
	return nil
}

// RestoreCheckpoint implements sandbox.CheckpointManager.
func (m *VMManager) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	s, err := m.ready(id)
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if err := checkpointsOn(s); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	s.life.Lock()
	defer s.life.Unlock()
	c := s.ck
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.find(n)
	if i < 0 {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s has no checkpoint %d", sandbox.ErrNotFound, id, n)
	}
	// Composed first: a checkpoint that does not compose leaves the
	// sandbox as it is.
	tmp := filepath.Join(s.dir, pausedDir+partialSuffix)
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return sandbox.CheckpointInfo{}, fmt.Errorf("restore checkpoint: %w", err)
	}
	kept := false
	defer func() {
		if !kept {
			os.RemoveAll(tmp)
		}
	}()
	if err := c.composeInto(i, tmp); err != nil {
		return sandbox.CheckpointInfo{}, fmt.Errorf("restore checkpoint %d of sandbox %s (it runs on as it was): %w", n, id, err)
	}
	if from, err := s.lc.move(evPauseStart); err != nil {
		if errors.Is(err, errCallsRunning) {
			return sandbox.CheckpointInfo{}, fmt.Errorf("%w: a command or a file transfer is running in sandbox %s; restore a checkpoint after it", sandbox.ErrBusy, id)
		}
		if from == phaseCell || from == phaseSnapshotting {
			return sandbox.CheckpointInfo{}, fmt.Errorf("%w: a cell is running in sandbox %s; restore a checkpoint between cells", sandbox.ErrBusy, id)
		}
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrBusy, id, from.State())
	}
	// From here the sandbox's machine is the checkpoint's: the VM that
	// runs now ends, as a pause's does, and the checkpoint's image is
	// resumed in its place.
	start := time.Now()
	p := s.proc
	p.ended.Store(true)
	p.stop(5 * time.Second)
	if err := s.cgroup.Close(); err != nil {
		m.log.Warn("remove a restored sandbox's VMM cgroup", "id", id, "error", err)
	}
	s.cgroup = nil
	os.RemoveAll(filepath.Join(s.dir, backingDir))
	os.RemoveAll(filepath.Join(s.dir, pausedDir))
	c.dropAfter(i)
	c.next = n + 1
	if err := renameDurable(tmp, filepath.Join(s.dir, pausedDir)); err != nil {
		m.loseOnPurpose(s, fmt.Sprintf("the image of its checkpoint %d could not be kept: %v", n, err))
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: restore checkpoint %d of sandbox %s: %v", sandbox.ErrLost, n, id, err)
	}
	kept = true
	trustImage(filepath.Join(s.dir, pausedDir))
	s.lc.move(evPaused)
	s.agent.DropIdle()
	if err := m.resumeLocked(ctx, s); err != nil {
		c.full = true
		return sandbox.CheckpointInfo{}, fmt.Errorf("restore checkpoint %d of sandbox %s: %w", n, id, err)
	}
	// The VMM restored checkpoint n exactly: its log of written pages is
	// relative to it, so the next checkpoint is a layer over it.
	c.resumed.Store(false)
	c.full = false
	info := c.infoAt(i)
	// Info.Cells counts the cells of the machine that runs: the
	// checkpoint's (its interpreters' execution counts came back with it).
	s.cells.Store(int64(info.ExecutionCount))
	m.log.Info("sandbox restored to a checkpoint", "id", id, "n", n, "took_ms", time.Since(start).Milliseconds())
	return info, nil
}

// Undo implements sandbox.CheckpointManager.
func (m *VMManager) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	s, err := m.get(id)
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if err := checkpointsOn(s); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	s.ck.mu.Lock()
	k := len(s.ck.points)
	n := 0
	if k >= 2 {
		n = s.ck.points[k-2].info.N
	}
	s.ck.mu.Unlock()
	if n == 0 {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: sandbox %s keeps %d checkpoints; an undo needs two", sandbox.ErrNotFound, id, k)
	}
	return m.RestoreCheckpoint(ctx, id, n)
}

// branchConfig is the configuration of a branch of cfg.Checkpoint (the
// parent's machine, as forkConfig makes a fork's), the image it restores
// (composed in a directory of its own), and what removes that directory
// once the branch's VMM holds its files.
func (m *VMManager) branchConfig(cfg sandbox.Config) (sandbox.Config, *restoreSource, func(), error) {
	none := func() {}
	ref := *cfg.Checkpoint
	if err := ref.Validate(); err != nil {
		return cfg, nil, none, err
	}
	parent, err := m.get(ref.Sandbox)
	if err != nil {
		return cfg, nil, none, err
	}
	if parent.ck == nil {
		return cfg, nil, none, fmt.Errorf("%w: sandbox %s has no checkpoints", sandbox.ErrNotFound, ref.Sandbox)
	}
	parent.netMu.Lock()
	pcfg := parent.cfg
	parent.netMu.Unlock()
	if cfg.VCPUs != 0 && cfg.VCPUs != pcfg.VCPUs || cfg.MemoryMiB != 0 && cfg.MemoryMiB != pcfg.MemoryMiB {
		return cfg, nil, none, fmt.Errorf("%w: a branch of sandbox %s has its machine: %d vCPUs and %d MiB", sandbox.ErrInvalid, ref.Sandbox, pcfg.VCPUs, pcfg.MemoryMiB)
	}
	hasNet := parent.net != nil
	wantsNet := cfg.Network != nil && len(cfg.Network.Allow) > 0
	switch {
	case hasNet && cfg.Network == nil:
		cfg.Network = pcfg.Network
	case hasNet && !wantsNet:
		return cfg, nil, none, fmt.Errorf("%w: network: sandbox %s's machine has a network device, so a branch of it needs a policy (network.allow), or none to keep its parent's", sandbox.ErrInvalid, ref.Sandbox)
	case !hasNet && wantsNet:
		return cfg, nil, none, fmt.Errorf("%w: network: sandbox %s's machine has no network device, and a branch cannot gain one", sandbox.ErrInvalid, ref.Sandbox)
	}
	if cfg.Root && !pcfg.Root {
		return cfg, nil, none, fmt.Errorf("%w: root: sandbox %s's cells run unprivileged, and so do its branches'", sandbox.ErrInvalid, ref.Sandbox)
	}
	if cfg.Image != "" && !(cfg.Image == pcfg.Image || isDefaultImage(cfg.Image) && isDefaultImage(pcfg.Image)) {
		return cfg, nil, none, fmt.Errorf("%w: image %q: a branch has its parent's image (%q)", sandbox.ErrInvalid, clip(cfg.Image, 64), pcfg.Image)
	}
	cfg.Image, cfg.VCPUs, cfg.MemoryMiB, cfg.Root = pcfg.Image, pcfg.VCPUs, pcfg.MemoryMiB, pcfg.Root
	if cfg.Env == nil {
		cfg.Env = pcfg.Env
	}
	c := parent.ck
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.find(ref.N)
	if i < 0 || c.closed {
		return cfg, nil, none, fmt.Errorf("%w: sandbox %s has no checkpoint %d", sandbox.ErrNotFound, ref.Sandbox, ref.N)
	}
	b := make([]byte, 6)
	rand.Read(b)
	dir := filepath.Join(c.dir, "branch-"+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return cfg, nil, none, fmt.Errorf("branch: %w", err)
	}
	cleanup := func() { os.RemoveAll(dir) }
	if err := c.composeInto(i, dir); err != nil {
		cleanup()
		return cfg, nil, none, fmt.Errorf("branch of checkpoint %d of sandbox %s: %w", ref.N, ref.Sandbox, err)
	}
	from := &restoreSource{dir: dir, name: "checkpoint " + strconv.Itoa(ref.N) + " of sandbox " + ref.Sandbox,
		startedFrom: sandbox.StartedFromSnapshot, env: pcfg.Env}
	if hasNet {
		from.mac = append(net.HardwareAddr(nil), parent.net.MAC...)
	}
	return cfg, from, cleanup, nil
}
