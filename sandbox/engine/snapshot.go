package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// A snapshot is a directory under the state directory's snapshots/: the
// VMM's state file and memory file (package vmm/snapshot) and what the
// daemon knows of it (snapshot.json). It is written as <id>.partial and
// renamed when complete, so a crash mid-snapshot leaves no snapshot that
// would not restore. The sandbox keeps running through it: its VMM pauses,
// writes both files and resumes (the guest's vsock connections are reset,
// and the agent client dials afresh).
//
// A fork is a sandbox whose VMM restores a snapshot instead of booting:
// the VMM inherits both files as descriptors (a jailed VMM's uid could not
// open them, and one file shared by many forks is what lets them share its
// unchanged pages), maps the memory copy-on-write, and the guest carries on
// with the snapshot's interpreter and variables. It gets a CID, a vsock
// socket and a jail of its own; the agent then mixes fresh host entropy
// into its kernel, steps its clock and reseeds the interpreter's
// generators, so no two forks draw the same numbers.

const (
	snapStateFile = "vm.state"
	snapMemFile   = "vm.mem"
	snapMetaFile  = "snapshot.json"
	partialSuffix = ".partial"
)

// snapshotTimeout bounds one snapshot: writing guest memory, at disk
// speed, is most of it.
const snapshotTimeout = 5 * time.Minute

// snapshotMeta is snapshot.json.
type snapshotMeta struct {
	Info sandbox.SnapshotInfo `json:"info"`
	// Config is the sandbox's at the time; a fork takes its env from it
	// when it sets none. A fork's lifetimes are its own create's, or the
	// daemon's defaults, as for any create.
	Config sandbox.Config `json:"config"`
	// Network says the snapshot's machine has a NIC, and MAC is its
	// address (the guest's driver read it at boot; a fork's NIC keeps it).
	Network bool   `json:"network"`
	MAC     string `json:"mac,omitempty"`
	// ImageUUID is the root image's ext4 UUID when the machine booted
	// (control.Spec.ImageUUID): a fork needs the same image.
	ImageUUID string `json:"image_uuid,omitempty"`
}

func newSnapshotID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "snap-" + hex.EncodeToString(b)
}

func (m *VMManager) snapshotsDir() string { return snapshotsDirIn(m.opt.StateDir) }

func snapshotsDirIn(stateDir string) string { return filepath.Join(stateDir, "snapshots") }

func (m *VMManager) snapshotDir(id string) string { return filepath.Join(m.snapshotsDir(), id) }

// hostControlPath is where the daemon finds a sandbox's VMM control socket.
func hostControlPath(dir string) string { return filepath.Join(runDir(dir), controlFile) }

// Snapshot implements Manager.
func (m *VMManager) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	s, err := m.ready(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if s.cfg.Workspace != "" {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: sandbox %s mounts workspace %s, which a snapshot cannot hold (its forks would share the volume); pause it instead", sandbox.ErrNotSupported, id, s.cfg.Workspace)
	}
	if from, err := s.lc.move(evSnapshotStart); err != nil {
		if errors.Is(err, errCallsRunning) {
			return sandbox.SnapshotInfo{}, fmt.Errorf("%w: a command or a file transfer is running in sandbox %s; snapshot it after", sandbox.ErrBusy, id)
		}
		if from == phaseCell || from == phaseSnapshotting {
			return sandbox.SnapshotInfo{}, fmt.Errorf("%w: a cell is running in sandbox %s; snapshot it between cells", sandbox.ErrBusy, id)
		}
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrBusy, id, from.State())
	}
	// The snapshot holds the sandbox as a cell would: busy, not idle,
	// until it ends (reapLoop).
	s.cellDeadline.Store(time.Now().Add(snapshotTimeout).UnixNano())
	defer func() {
		s.lastUsed.Store(time.Now().UnixNano())
		s.lc.move(evSnapshotEnd)
	}()
	if _, err := os.Stat(hostControlPath(s.dir)); err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("%w: sandbox %s's VMM has no control socket (it was started by an older cellvm)", sandbox.ErrNotSupported, id)
	}
	release, err := m.disk.reserve(m, "snapshot", id, imageBound(s.cfg.MemoryMiB))
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	defer release()
	snapID := newSnapshotID()
	dir := m.snapshotDir(snapID)
	tmp := dir + partialSuffix
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot directory: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	start := time.Now()
	if err := m.takeSnapshot(ctx, s, tmp, control.ThenResume); err != nil {
		if !s.proc.alive() {
			m.markLost(s)
			return sandbox.SnapshotInfo{}, fmt.Errorf("%w: sandbox %s's VM exited during the snapshot", sandbox.ErrLost, id)
		}
		if errors.Is(err, control.CodeNoSpace) || errors.Is(err, syscall.ENOSPC) {
			return sandbox.SnapshotInfo{}, fmt.Errorf("%w: the host's disk is full: %v", sandbox.ErrFull, err)
		}
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot of sandbox %s: %w", id, err)
	}
	// The guest reset its vsock connections; idle ones would fail.
	s.agent.DropIdle()
	s.netMu.Lock()
	cfg := s.cfg
	s.netMu.Unlock()
	meta := snapshotMeta{
		Info: sandbox.SnapshotInfo{
			ID: snapID, SandboxID: id, CreatedAt: time.Now().UTC(),
			SizeBytes: diskUsage(filepath.Join(tmp, snapStateFile)) + diskUsage(filepath.Join(tmp, snapMemFile)),
			VCPUs:     cfg.VCPUs, MemoryMiB: cfg.MemoryMiB, Tenant: cfg.Tenant,
		},
		Config: cfg, Network: s.net != nil,
	}
	if spec, err := control.ReadSpec(filepath.Join(s.dir, specFile)); err == nil {
		meta.ImageUUID = spec.ImageUUID
	}
	if s.net != nil {
		meta.MAC = s.net.MAC.String()
	}
	b, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if err := writeFileSync(filepath.Join(tmp, snapMetaFile), b, 0o600); err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot metadata: %w", err)
	}
	if err := renameDurable(tmp, dir); err != nil {
		return sandbox.SnapshotInfo{}, fmt.Errorf("snapshot directory: %w", err)
	}
	trustImage(dir)
	done = true
	m.log.Info("snapshot taken", "id", snapID, "sandbox", id, "size_bytes", meta.Info.SizeBytes, "took_ms", time.Since(start).Milliseconds())
	return meta.Info, nil
}

// takeSnapshot has the sandbox's VMM write its snapshot into dir and then
// carry on (then) within snapshotTimeout.
func (m *VMManager) takeSnapshot(ctx context.Context, s *vmSandbox, dir string, then control.Then) error {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	return m.saveMachine(ctx, s, dir, then, false)
}

// saveMachine has the sandbox's VMM write its machine into dir and then
// carry on or end (then), for as long as ctx allows. With layer, the VMM
// may write the memory as a layer over the image it was restored from
// (pausechain.go: only a pause of a sandbox resumed from its own image
// asks); a snapshot is always a whole image, which forks may share.
func (m *VMManager) saveMachine(ctx context.Context, s *vmSandbox, dir string, then control.Then, layer bool) error {
	state, err := os.OpenFile(filepath.Join(dir, snapStateFile), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer state.Close()
	mem, err := os.OpenFile(filepath.Join(dir, snapMemFile), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer mem.Close()
	cg := ""
	if s.cgroup != nil {
		cg = s.cgroup.Path
	}
	if needPrealloc(cg, then != control.ThenStop) { // memcharge.go
		pre := time.Now()
		if did, err := preallocateMemory(mem, s.cfg.MemoryMiB); err != nil {
			// The save still runs; on a tmpfs its pages are then the VMM's.
			m.log.Warn("memory file not preallocated; the VMM's cgroup pays for it", "sandbox", s.id, "error", err)
		} else if did {
			m.log.Info("memory file preallocated (a tmpfs or overlay state directory)", "sandbox", s.id, "memory_mib", s.cfg.MemoryMiB, "took_ms", time.Since(pre).Milliseconds())
		}
	}
	if layer {
		return control.SnapshotLayer(ctx, hostControlPath(s.dir), state, mem, then)
	}
	return control.Snapshot(ctx, hostControlPath(s.dir), state, mem, then)
}

// diskUsage is the bytes a file takes on disk (a memory file has holes).
func diskUsage(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// loadSnapshot reads a snapshot's metadata.
func (m *VMManager) loadSnapshot(id string) (*snapshotMeta, error) {
	if !sandbox.ValidSnapshotID(id) {
		return nil, fmt.Errorf("%w: %q is not a snapshot id (snap- and 12 hex digits)", sandbox.ErrInvalid, clip(id, 64))
	}
	b, err := os.ReadFile(filepath.Join(m.snapshotDir(id), snapMetaFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no snapshot %s", sandbox.ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	var meta snapshotMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return nil, fmt.Errorf("snapshot %s: bad %s: %w", id, snapMetaFile, err)
	}
	meta.Info.Tenant = meta.Config.Tenant // its sandbox's owner
	return &meta, nil
}

// ListSnapshots implements Manager.
func (m *VMManager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	ents, err := os.ReadDir(m.snapshotsDir())
	if errors.Is(err, os.ErrNotExist) {
		return []sandbox.SnapshotInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	out := []sandbox.SnapshotInfo{}
	for _, e := range ents {
		if !e.IsDir() || !sandbox.ValidSnapshotID(e.Name()) {
			continue // a partial snapshot, or not ours
		}
		meta, err := m.loadSnapshot(e.Name())
		if err != nil {
			m.log.Warn("unreadable snapshot skipped", "id", e.Name(), "error", err)
			continue
		}
		out = append(out, meta.Info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// GetSnapshot implements Manager.
func (m *VMManager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	meta, err := m.loadSnapshot(id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	return meta.Info, nil
}

// DeleteSnapshot implements Manager. Forks running from it keep its memory
// file open (and mapped), so they are not affected.
func (m *VMManager) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := m.loadSnapshot(id); err != nil {
		return err
	}
	err := os.RemoveAll(m.snapshotDir(id))
	if err != nil {
		// A fork recording the snapshot's working set (forkwset.go) may
		// have put its file in the directory while it was emptied.
		err = os.RemoveAll(m.snapshotDir(id))
	}
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	m.log.Info("snapshot deleted", "id", id)
	return nil
}

// forkConfig is the configuration of a fork of cfg.Snapshot: the
// snapshot's machine, and what cfg does not set from the snapshot's
// sandbox. A fork's machine is the snapshot's: a different vCPU count or
// memory size is refused, and so is root for a snapshot whose cells ran
// unprivileged (a fork of a root sandbox is root).
// A fork's labels are its own create's, never its parent's: a label says
// who asked for a sandbox and why (E2B's metadata), and a fork's asker is
// not its parent's; a caller that wants them copies them into the create.
func (m *VMManager) forkConfig(cfg sandbox.Config) (sandbox.Config, *snapshotMeta, error) {
	meta, err := m.loadSnapshot(cfg.Snapshot)
	if err != nil {
		return cfg, nil, err
	}
	if cfg.VCPUs != 0 && cfg.VCPUs != meta.Info.VCPUs {
		return cfg, nil, fmt.Errorf("%w: vcpus %d: a fork of %s has the snapshot's %d vCPUs", sandbox.ErrInvalid, cfg.VCPUs, cfg.Snapshot, meta.Info.VCPUs)
	}
	if cfg.MemoryMiB != 0 && cfg.MemoryMiB != meta.Info.MemoryMiB {
		return cfg, nil, fmt.Errorf("%w: memory_mib %d: a fork of %s has the snapshot's %d MiB", sandbox.ErrInvalid, cfg.MemoryMiB, cfg.Snapshot, meta.Info.MemoryMiB)
	}
	// A fork's network: the request's policy, or else the parent's. The
	// machine's NIC is in the snapshot: a fork of a machine with one needs
	// a network, and one without cannot gain a NIC.
	wantsNet := cfg.Network != nil && len(cfg.Network.Allow) > 0
	switch {
	case meta.Network && cfg.Network == nil:
		cfg.Network = meta.Config.Network
		if cfg.Network == nil || len(cfg.Network.Allow) == 0 {
			return cfg, nil, fmt.Errorf("%w: snapshot %s has a network device but no policy was recorded with it; give the fork one (network.allow)", sandbox.ErrInvalid, cfg.Snapshot)
		}
	case meta.Network && !wantsNet:
		return cfg, nil, fmt.Errorf("%w: network: snapshot %s's machine has a network device, so a fork of it needs a policy (network.allow), or none to keep its parent's", sandbox.ErrInvalid, cfg.Snapshot)
	case !meta.Network && wantsNet:
		return cfg, nil, fmt.Errorf("%w: network: snapshot %s's machine has no network device, and a fork cannot gain one; snapshot a sandbox created with a network policy", sandbox.ErrInvalid, cfg.Snapshot)
	}
	if meta.Network {
		if _, err := net.ParseMAC(meta.MAC); err != nil {
			return cfg, nil, fmt.Errorf("%w: snapshot %s has a network device with no MAC recorded (made by an older cellvm); snapshot its sandbox again", sandbox.ErrNotSupported, cfg.Snapshot)
		}
	}
	// Whether cells run as root is on the guest's command line, which
	// the fork's kernel has from the snapshot.
	if cfg.Root && !meta.Config.Root {
		return cfg, nil, fmt.Errorf("%w: root: %s's cells run unprivileged, and so do its forks' (fork a snapshot of a root sandbox)", sandbox.ErrInvalid, cfg.Snapshot)
	}
	// The fork's memory caches its parent's image's files.
	if cfg.Image != "" && !(cfg.Image == meta.Config.Image || isDefaultImage(cfg.Image) && isDefaultImage(meta.Config.Image)) {
		return cfg, nil, fmt.Errorf("%w: image %q: a fork of %s boots nothing; it has its snapshot's image (%q)", sandbox.ErrInvalid, clip(cfg.Image, 64), cfg.Snapshot, meta.Config.Image)
	}
	cfg.Image = meta.Config.Image
	if err := m.sameImage(meta.Config.Tenant, cfg.Image, meta.ImageUUID, "snapshot "+cfg.Snapshot); err != nil {
		return cfg, nil, err
	}
	cfg.VCPUs, cfg.MemoryMiB, cfg.Root = meta.Info.VCPUs, meta.Info.MemoryMiB, meta.Config.Root
	if cfg.Env == nil {
		cfg.Env = meta.Config.Env
	}
	return cfg, meta, nil
}

// restoreFiles opens the snapshot's files in from into st's restore
// slots (openImage).
func restoreFiles(from *restoreSource, st *vmStart) error {
	if err := openImage(from.dir, st); err != nil {
		return fmt.Errorf("%s: %w", from.name, err)
	}
	st.spec.Restore.Prefetch = from.prefetch
	return nil
}

// reseedTimeout bounds the reseed of a restored guest. On hardware it
// takes milliseconds; the first touches of a restored guest's memory (read
// from its image as it faults in) can make it seconds, and under the nested
// rig's emulation, with the host loaded, one took 34 s. A guest that never
// answers loses no more than this.
const reseedTimeout = 2 * time.Minute

// reseedPendingFile, in a sandbox's directory, says that its VMM restores
// an image whose guest has not been reseeded yet, and how ("all" or
// "kernel": agentclient.Renew): written before the VMM starts, removed
// once the reseed is done. A daemon that died in between finds it when it
// takes the sandbox back, and reseeds it then (reseedAdopted): an adopted
// fork would otherwise keep its template's random state and clock.
const reseedPendingFile = "reseed-pending"

// markReseedPending records, durably, that the guest of the sandbox in
// dir is to be reseeded with renew.
func markReseedPending(dir string, renew agentclient.Renew) error {
	f, err := os.OpenFile(filepath.Join(dir, reseedPendingFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("mark the reseed pending: %w", err)
	}
	_, err = f.WriteString(renew.String())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("mark the reseed pending: %w", err)
	}
	return nil
}

// reseedAdopted reseeds the guests of the sandboxes taken back running
// whose reseed an earlier daemon left pending (reseedPendingFile). One
// that will not take it is stopped, and so lost: it would repeat its
// parent's random numbers.
func (m *VMManager) reseedAdopted() {
	for _, s := range m.sandboxes {
		if s.proc == nil || s.agent == nil || s.lc.phase() != phaseRunning {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, reseedPendingFile))
		if err != nil {
			continue
		}
		renew := agentclient.RenewAll
		if string(b) == agentclient.RenewKernel.String() {
			renew = agentclient.RenewKernel
		}
		if err := m.newMachine(context.Background(), s, renew); err != nil {
			m.log.Error("a sandbox taken back before its guest was reseeded would not take the reseed; stopping it", "id", s.id, "error", err)
			s.proc.stop(3 * time.Second)
			continue
		}
		os.Remove(filepath.Join(s.dir, reseedPendingFile))
		m.log.Info("reseeded a sandbox taken back before its guest was reseeded", "id", s.id, "renew", renew)
	}
}

// newMachine makes a restored guest current: a fork's or a template
// start's a machine of its own (renew agentclient.RenewAll: see the top of
// this file), a resumed one the same machine later (RenewKernel: its
// kernel's pool and clock renewed, the user's seeded generators carrying
// on).
func (m *VMManager) newMachine(ctx context.Context, s *vmSandbox, renew agentclient.Renew) error {
	ctx, cancel := context.WithTimeout(ctx, reseedTimeout)
	defer cancel()
	var nc *proto.NetConfig
	if s.net != nil {
		// The guest keeps the address it had when it was saved: a fork's
		// is its own TAP's (and a resumed sandbox's is what it was).
		nc = &proto.NetConfig{Addr: s.net.GuestAddr.String(), Gateway: s.net.Gateway.String(), DNS: []string{s.net.DNS.String()}}
	}
	r, err := s.agent.Reseed(ctx, time.Now(), nc, renew)
	if err != nil {
		return fmt.Errorf("the restored guest would not take fresh entropy, the host's clock and its network: %w", err)
	}
	m.log.Info("restored guest reseeded", "id", s.id, "renew", renew, "kernel", r.Kernel, "clock", r.Clock,
		"interpreter", r.Interpreter, "numpy", r.NumPy, "network", r.Network, "guest_steps_us", r.Steps)
	return nil
}
