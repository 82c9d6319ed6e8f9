package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/consolelog"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Options configure a VMManager.
type Options struct {
	// Exe is the binary started as `Exe vmm --config FILE` for each VM:
	// cellvm-vmm, the VMM's own small binary, or cellvm itself (the
	// daemon chooses: cmd/cellvm's vmmBinary).
	Exe string
	// ExeEnv is added to a VMM's otherwise empty environment (vmmEnv).
	// Only a test binary that runs as cellvm sets it (cmd/cellvm's
	// TestMain: CELLVM_TEST_MAIN gives it its role); the daemon passes
	// nothing of its own environment on.
	ExeEnv []string
	// Kernel, Initrd and RootFS are the guest's kernel, initramfs (with
	// cellvm-init) and read-only root image.
	Kernel, Initrd, RootFS string
	// StateDir holds one directory per sandbox (its VMM config, console,
	// log and vsock socket). A restarted manager finds its sandboxes here.
	StateDir string
	// MaxSandboxes and MaxMemoryMiB cap the host; 0 means no cap.
	MaxSandboxes int
	MaxMemoryMiB int
	// BootTimeout bounds the wait for a new guest's agent (default 60 s),
	// counted from the start's admission (admit.go), not the request.
	BootTimeout time.Duration
	// BootConcurrency bounds the VMs starting at once (boots, restores,
	// resumes; admit.go); 0 means DefaultBootConcurrency.
	BootConcurrency int
	// BootQueue bounds the starts waiting for a slot; one more is refused
	// at once (sandbox.ErrQueueFull). 0 means DefaultBootQueuePerSlot per
	// slot; below 0, none wait.
	BootQueue int
	// MaxUploadBytes bounds one upload (default 1 GiB).
	MaxUploadBytes int64
	// MaxDownloadBytes bounds one download (default 4 GiB): a file the
	// guest announces as larger is refused with ErrTooLarge.
	MaxDownloadBytes int64
	// CallGrace is how long past a cell's or a command's own timeout the
	// host waits for the guest's answer before it stops waiting (default
	// 15 s): the guest enforces the timeout, but the host does not rely
	// on it.
	CallGrace time.Duration
	// ConsoleMaxBytes caps each sandbox's console log: the VMM keeps the
	// newest output within it (default consolelog.DefaultMax; at least
	// consolelog.MinMax).
	ConsoleMaxBytes int64
	// Net enforces network policies; without it a sandbox asking for
	// network is refused (ErrNotSupported).
	Net *netpolicy.Host
	// Jail confines every VMM process (see JailOptions); nil runs them
	// unjailed.
	Jail *JailOptions
	// TestHooks arms each VMM's test-only seccomp trigger (SIGUSR2 makes a
	// forbidden system call). Only tests set it.
	TestHooks bool
	// Node, when set, is written into every sandbox id ("sb-NODE-<hex>"),
	// so a router in front of many daemons can tell from an id alone
	// which daemon holds it (see ValidNode).
	Node string
	// Templates configures warm starts from templates (template.go);
	// off unless Enabled.
	Templates TemplateOptions
	// MaxImageBytes caps the disk that machine images take (snapshots,
	// paused sandboxes; diskcap.go); 0 means no cap.
	MaxImageBytes int64
	// WorkspaceBytes is the size of a workspace made from now on
	// (workspace.go), the most it can hold; 0 means
	// sandbox.DefaultWorkspaceBytes.
	WorkspaceBytes int64
	// MaxWorkspaces caps how many workspaces there are (so their disk is
	// at most MaxWorkspaces * WorkspaceBytes); 0 means no cap. A create
	// that would make one more is ErrFull.
	MaxWorkspaces int
	// AllowPrivate returns the ranges of the operator's denied egress
	// that a tenant's sandboxes may reach (the tenant config's
	// egress_allow_private); nil: none beyond the host's own.
	AllowPrivate func(tenant string) []netip.Prefix
	// ImagesDir holds the images (one directory per image, image.go),
	// made by CreateImage (imagebuild.go); "" means StateDir/images.
	ImagesDir string
	// ImageBuild configures CreateImage's builder VM and caps.
	ImageBuild ImageBuildOptions
	// DefaultTTL and DefaultIdleTimeout are given to a sandbox whose
	// create leaves them 0 (0 here: none), and MaxTTL caps the TTL a
	// create may ask for (0: no cap); see sandbox.Lifetimes.
	DefaultTTL, DefaultIdleTimeout, MaxTTL time.Duration
	// CheckpointDir holds the sandboxes' checkpoints (checkpoints.go), one
	// directory each; "" means in each sandbox's own directory.
	CheckpointDir string
	// CheckpointMaxBytes bounds the disk one sandbox's checkpoints take:
	// past it the oldest go (at least one is kept); 0 means no bound.
	CheckpointMaxBytes int64
	// VMMPool is how many VMM processes are kept started ahead of the VMs
	// that will need them (vmmpool.go); 0: none (serve's default,
	// --vmm-pool -1, is DefaultVMMPool). A pool that cannot be made is
	// logged and left off.
	VMMPool int
	Log     *slog.Logger
}

// lifetimes are the options' defaults and cap for sandboxes' lifetimes.
func (o Options) lifetimes() sandbox.Lifetimes {
	return sandbox.Lifetimes{DefaultTTL: o.DefaultTTL, DefaultIdleTimeout: o.DefaultIdleTimeout, MaxTTL: o.MaxTTL}
}

// VMManager is the Manager that runs each sandbox in its own microVM.
type VMManager struct {
	opt Options
	log *slog.Logger

	mu        sync.Mutex
	sandboxes map[string]*vmSandbox
	nextCID   uint64
	closed    bool
	stopReap  chan struct{}
	reapDone  chan struct{}
	// templates owns the warm-start templates (template.go); nil when
	// they are off.
	templates *templates

	events sandbox.EventHub
	disk   diskCap // reservations under Options.MaxImageBytes
	// imageLocks are the image entries being made or deleted (m.mu).
	imageLocks map[string]bool
	// admit bounds the VMs starting at once (admit.go).
	admit *admission
	// pool holds VMM processes started ahead (vmmpool.go); nil: none.
	pool *vmmPool
}

type vmSandbox struct {
	id      string
	dir     string
	cfg     sandbox.Config
	created time.Time
	cid     uint64
	proc    *vmProc
	agent   *agentclient.Client
	net     *netpolicy.Attachment // nil: no network device
	cgroup  *jail.Cgroup          // the jailed VMM's cgroup; nil: none
	lost    atomic.Pointer[sandbox.LostInfo]

	// netMu guards cfg.Network, which SetNetwork replaces, and proc once
	// the sandbox runs, which a resume replaces (pause.go).
	netMu sync.Mutex
	// life serialises pause, resume and destroy (pause.go).
	life sync.Mutex
	// pauseAbort ends a pause's wait for its VMM's save (destroy); nil
	// when none waits. Guarded by netMu.
	pauseAbort context.CancelFunc
	// fold is the fold of its pause chain in progress (compact.go); nil
	// when none runs. Guarded by netMu.
	fold *folding
	// lc is the sandbox's phase (lifecycle.go): its state as callers see
	// it, and what excludes what (a cell, a snapshot, a pause).
	lc lifecycle
	// cellDeadline is when the running cell's host deadline passes (unix
	// nanoseconds): a cell still "running" after it is stuck on the host
	// side and no longer holds off idle reaping.
	cellDeadline atomic.Int64
	// violation is set (once) when the guest broke the agent protocol and
	// its VM was stopped for it.
	violation atomic.Pointer[error]
	cells     atomic.Int64
	lastUsed  atomic.Int64 // unix nanoseconds
	bootMS    atomic.Int64 // how long Create took to boot the VM
	queuedMS  atomic.Int64 // how long its start waited for a slot (admit.go)
	// startSteps says where its start's time went (launch), for the
	// "sandbox created" line: set once, before the sandbox is shared.
	startSteps startSteps
	// startedFrom is Info.StartedFrom.
	startedFrom string
	// internal: a template build's or an image build's VM, which no
	// caller sees.
	internal bool
	// imageEntry is the store entry of the image it booted ("": the
	// default; see imageEntry), set at launch.
	imageEntry string
	// languages caches the languages of its image (contexts.go).
	languages atomic.Pointer[[]cell.LanguageInfo]
	// ck is its checkpoints (checkpoints.go); nil when it has none. Set
	// before it first runs, never changed after.
	ck *ckChain
	// recordWorkingSet is the directory of the snapshot whose working
	// set the sandbox, a fork of it, records after its first cell's
	// result (forkwset.go); nil when it records none, or has.
	recordWorkingSet atomic.Pointer[string]
}

func (s *vmSandbox) State() sandbox.State { return s.lc.phase().State() }

// NewVMManager returns a manager and takes back (or cleans up) what an
// earlier manager left in opt.StateDir.
func NewVMManager(opt Options) (*VMManager, error) {
	started := time.Now()
	if opt.Log == nil {
		opt.Log = slog.New(slog.DiscardHandler)
	}
	if opt.BootTimeout == 0 {
		opt.BootTimeout = 60 * time.Second
	}
	if opt.MaxUploadBytes == 0 {
		opt.MaxUploadBytes = 1 << 30
	}
	if opt.MaxDownloadBytes == 0 {
		opt.MaxDownloadBytes = 4 << 30
	}
	if opt.CallGrace == 0 {
		opt.CallGrace = DefaultCallGrace
	}
	if opt.ConsoleMaxBytes == 0 {
		opt.ConsoleMaxBytes = consolelog.DefaultMax
	}
	if opt.ConsoleMaxBytes < consolelog.MinMax {
		return nil, fmt.Errorf("console log cap %d bytes is below the minimum %d", opt.ConsoleMaxBytes, consolelog.MinMax)
	}
	for name, p := range map[string]string{"VMM binary": opt.Exe, "kernel": opt.Kernel, "initramfs": opt.Initrd, "root image": opt.RootFS} {
		if p == "" {
			return nil, fmt.Errorf("no %s configured", name)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%s: %w (run 'make setup')", name, err)
		}
	}
	if err := sandbox.ValidNode(opt.Node); err != nil {
		return nil, err
	}
	if err := opt.lifetimes().Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(opt.StateDir, "sandboxes"), 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	imageChecks.setLog(opt.Log)
	m := &VMManager{
		opt: opt, log: opt.Log, sandboxes: map[string]*vmSandbox{}, nextCID: 3,
		stopReap: make(chan struct{}), reapDone: make(chan struct{}),
		admit: newAdmission(opt.BootConcurrency, opt.BootQueue),
	}
	if err := m.checkNetworkState(); err != nil {
		return nil, err
	}
	// The pool only saves time: a daemon that cannot make one serves
	// without it, and says so.
	pool, err := m.newPool()
	if err != nil {
		m.log.Warn("vmm pool: off; every start spawns its own VMM process (serve --vmm-pool 0 turns the pool off without this warning)", "err", err)
		os.RemoveAll(m.poolDir())
		pool = nil
	}
	m.pool = pool
	m.recover()
	m.restartCheckpoints()
	m.sweepImageBuilds()
	m.pool.start()
	if opt.Templates.Enabled {
		m.templates = newTemplates(m, opt.Templates, opt.StateDir, m.log)
		m.templates.started = started
		m.templates.start()
	}
	go m.reapLoop()
	return m, nil
}

func newID(node string) string {
	b := make([]byte, 6)
	rand.Read(b)
	if node != "" {
		return "sb-" + node + "-" + hex.EncodeToString(b)
	}
	return "sb-" + hex.EncodeToString(b)
}

func (m *VMManager) sandboxDir(id string) string {
	return filepath.Join(m.opt.StateDir, "sandboxes", id)
}

// reserve checks the caps and claims an id and a CID. An internal
// sandbox (in non-nil: a template build's, an image build's) counts
// against the memory cap only.
//
// Where a slot to start the VM in is free at once (admission.tryAdmit),
// reserve takes it (slot, the caller's to release), and where the pool
// also has a process born in a cgroup named after an id of its own, the
// sandbox takes that id and the process, which is then the caller's to
// start the VM in or end (vmmpool.go). A start that must wait for its
// slot takes no process here: it would hold a ready one idle while it
// waits, and end it if it is refused or given up. Once admitted it
// claims one by kind (startVMM's claimFor), which moves the process
// into its VM's cgroup, or starts its own.
func (m *VMManager) reserve(cfg sandbox.Config, in *internalLaunch) (_ *vmSandbox, _ *pooledVMM, slot func(), _ error) {
	internal := in != nil
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, nil, nil, fmt.Errorf("%w: manager is shutting down", sandbox.ErrBusy)
	}
	if n := m.countSandboxes(); !internal && m.opt.MaxSandboxes > 0 && n >= m.opt.MaxSandboxes {
		return nil, nil, nil, fmt.Errorf("%w: %d sandboxes running, the cap is %d", sandbox.ErrFull, n, m.opt.MaxSandboxes)
	}
	if m.opt.MaxMemoryMiB > 0 {
		used := 0
		for _, s := range m.sandboxes {
			used += s.heldMemoryMiB()
		}
		if used+cfg.MemoryMiB > m.opt.MaxMemoryMiB {
			return nil, nil, nil, fmt.Errorf("%w: %d MiB of guest memory in use, %d more would pass the cap of %d MiB",
				sandbox.ErrFull, used, cfg.MemoryMiB, m.opt.MaxMemoryMiB)
		}
	}
	if cfg.Workspace != "" {
		if s := m.workspaceHolder(cfg.Tenant, cfg.Workspace, nil); s != nil {
			return nil, nil, nil, fmt.Errorf("%w: workspace %s is mounted by sandbox %s (%s); one sandbox at a time can hold a workspace", sandbox.ErrBusy, cfg.Workspace, s.id, s.State())
		}
	}
	used := map[uint64]bool{}
	for _, s := range m.sandboxes {
		used[s.cid] = true
	}
	for used[m.nextCID] {
		m.nextCID++
	}
	cid := m.nextCID
	m.nextCID++
	id := newID(m.opt.Node)
	var pooled *pooledVMM
	if slot, _ = m.admit.tryAdmit(internal && in.priority); slot != nil {
		if pooled = m.pool.claimNamed(); pooled != nil {
			id = pooled.id
		}
	}
	// Hold its place while the VM boots, so concurrent creates count it.
	s := &vmSandbox{id: id, cfg: cfg, cid: cid, created: time.Now(), dir: m.sandboxDir(id), internal: internal}
	if internal {
		s.dir = in.dir(id)
	}
	m.sandboxes[id] = s // in phaseStarting, the zero phase
	return s, pooled, slot, nil
}

// countSandboxes counts the sandboxes callers see (not template builds).
// Caller holds m.mu.
func (m *VMManager) countSandboxes() int {
	n := 0
	for _, s := range m.sandboxes {
		if !s.internal {
			n++
		}
	}
	return n
}

// guestCmdline is the kernel command line of a sandbox's guest.
func guestCmdline() string {
	return fmt.Sprintf("console=ttyS0 %s 8250.nr_uarts=1 nomodule quiet cellvm.time=%d", vmm.RebootArgs, time.Now().Unix())
}

// Create implements Manager.
func (m *VMManager) Create(ctx context.Context, cfg sandbox.Config) (info sandbox.Info, err error) {
	var from *restoreSource // a fork of a snapshot (snapshot.go) or a template
	if cfg.Checkpoint != nil {
		var cleanup func()
		if cfg, from, cleanup, err = m.branchConfig(cfg); err != nil {
			return sandbox.Info{}, err
		}
		defer cleanup() // once its VMM holds the files, or failed to start
	} else if cfg.Snapshot != "" { // both: refused by Validate below
		var fork *snapshotMeta
		if cfg, fork, err = m.forkConfig(cfg); err != nil {
			return sandbox.Info{}, err
		}
		from = &restoreSource{dir: m.snapshotDir(fork.Info.ID), name: "snapshot " + fork.Info.ID, startedFrom: sandbox.StartedFromSnapshot, env: fork.Config.Env}
		from.prefetch, from.recordWorkingSet = m.forkPrefetch(from.dir) // forkwset.go
		if fork.Network {
			from.mac, _ = net.ParseMAC(fork.MAC) // forkConfig checked it
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	if cfg, err = cfg.WithLifetimes(m.opt.lifetimes()); err != nil {
		return sandbox.Info{}, err
	}
	entry, err := m.imageEntry(cfg.Tenant, cfg.Image)
	if err != nil {
		return sandbox.Info{}, err
	}
	var policy egress.Policy
	if cfg.Network != nil && len(cfg.Network.Allow) > 0 {
		if m.opt.Net == nil {
			return sandbox.Info{}, fmt.Errorf("%w: this manager has no network policy support (run the daemon as root with iptables)", sandbox.ErrNotSupported)
		}
		if policy, err = egress.Parse(cfg.Network.Allow); err != nil {
			return sandbox.Info{}, fmt.Errorf("%w: network: %v", sandbox.ErrInvalid, err)
		}
	}
	var tpl *templateUse
	if from == nil {
		// Templates are per image: the store's entry, not the name.
		tcfg := cfg
		tcfg.Image = entry
		tpl = m.templates.use(tcfg, policy)
		if tpl != nil {
			from = &tpl.source
		}
	}
	s, err := m.launch(ctx, cfg, policy, from, nil)
	if err != nil && tpl != nil && ctx.Err() == nil && !errors.Is(err, sandbox.ErrFull) && !errors.Is(err, sandbox.ErrBusy) {
		// A create never fails for its template: it boots. A template
		// whose files verify is kept, and tried once more first (the
		// failure was most likely the host's load); one whose files do
		// not is dropped until its next build.
		if verr := m.templates.verify(tpl); verr != nil {
			m.templates.broken(tpl, fmt.Errorf("%w; its files fail verification: %v", err, verr))
		} else {
			m.log.Info("a sandbox could not start from its template, whose files verify; trying once more", "template", tpl.key, "error", clip(err.Error(), 2048))
			s, err = m.launch(ctx, cfg, policy, from, nil)
			if err != nil && ctx.Err() == nil && !errors.Is(err, sandbox.ErrFull) && !errors.Is(err, sandbox.ErrBusy) {
				m.templates.failedOnce(tpl, err)
			}
		}
		if err != nil && ctx.Err() == nil && !errors.Is(err, sandbox.ErrFull) && !errors.Is(err, sandbox.ErrBusy) {
			s, err = m.launch(ctx, cfg, policy, nil, nil)
		}
	}
	if err != nil {
		return sandbox.Info{}, err
	}
	m.log.Info("sandbox created", "id", s.id, "vcpus", cfg.VCPUs, "memory_mib", cfg.MemoryMiB, "started_from", s.startedFrom, "boot_ms", s.bootMS.Load(), "queued_ms", s.queuedMS.Load(), "steps", s.startSteps)
	m.events.Publish(sandbox.Event{Type: sandbox.EventCreated, Sandbox: s.id, Tenant: s.cfg.Tenant})
	return m.info(s), nil
}

// restoreSource is a snapshot directory (a user's snapshot or a template)
// that a VM restores instead of booting.
type restoreSource struct {
	dir         string
	name        string // for errors: "snapshot snap-...", "template ..."
	startedFrom string
	mac         net.HardwareAddr  // the machine's NIC's, when it has one
	env         map[string]string // the env its guest has (a snapshot's sandbox's)
	// prefetch is the snapshot's recorded working set (templatewset.go),
	// checked to be its memory file's; none when nil.
	prefetch []snapshot.Extent
	// recordWorkingSet says the sandbox records the snapshot's working
	// set after its first cell's result (forkwset.go).
	recordWorkingSet bool
}

// launch starts a running sandbox of cfg: booted, or restored from from.
// An internal sandbox (a template build's) lives under the templates'
// directory, is neither listed nor watched, and does not count against
// the cap on sandboxes. A failed launch leaves nothing behind.
func (m *VMManager) launch(ctx context.Context, cfg sandbox.Config, policy egress.Policy, from *restoreSource, in *internalLaunch) (_ *vmSandbox, err error) {
	internal := in != nil
	s, pooled, slot, err := m.reserve(cfg, in)
	if err != nil {
		return nil, err
	}
	id, cid := s.id, s.cid
	defer func() {
		if err != nil {
			if pooled != nil { // not yet handed to startVMM
				pooled.end()
			}
			m.destroy(s)
		}
	}()
	s.startedFrom = sandbox.StartedFromBoot
	if from != nil {
		s.startedFrom = from.startedFrom
		if from.recordWorkingSet {
			s.recordWorkingSet.Store(&from.dir)
		}
	}
	// A slot to start the VM in (admit.go) before anything is made,
	// unless reserve took one free at once: a start refused or given up
	// while it waits leaves only the reservation, which destroy drops.
	// The boot's deadline (bootCtx, startVMM's) is set after this, so it
	// counts from the admission.
	release := slot
	if release == nil {
		var waited time.Duration
		release, waited, err = m.admit.admit(ctx, in != nil && in.priority)
		s.queuedMS.Store(waited.Milliseconds())
		if err != nil {
			return nil, err
		}
	}
	defer release() // the VM has started (its agent answered) or failed
	admitted := time.Now()
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox directory: %w", err)
	}
	if err := writeConfig(s.dir, cfg); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.dir, startedFromFile), []byte(s.startedFrom), 0o600); err != nil {
		return nil, fmt.Errorf("sandbox directory: %w", err)
	}
	if err := os.Mkdir(runDir(s.dir), 0o755); err != nil {
		return nil, fmt.Errorf("sandbox run directory: %w", err)
	}
	if s.imageEntry, err = m.imageEntry(cfg.Tenant, cfg.Image); err != nil {
		return nil, err
	}
	rootImage, err := m.entryPath(s.imageEntry)
	if err != nil {
		return nil, err
	}
	st := vmStart{files: control.Files{}, spec: control.Spec{
		Kernel: m.opt.Kernel, Initrd: m.opt.Initrd, Cmdline: guestCmdline(),
		VCPUs: cfg.VCPUs, MemoryMiB: uint64(cfg.MemoryMiB),
		Disks:     []control.Disk{{Path: rootImage, ReadOnly: true}},
		ImageUUID: imageUUID(rootImage),
		Vsock:     &control.Vsock{CID: cid, UDS: filepath.Join(runDir(s.dir), vsockFile)},
		Control:   hostControlPath(s.dir),

		ConsoleMaxBytes: m.opt.ConsoleMaxBytes,
	}}
	defer st.files.Close() // startVMM's once it is called
	spec := &st.spec
	spec.Checkpoints = cfg.Checkpoints != nil
	if cfg.Root {
		spec.Cmdline += " cellvm.cellsroot=1"
	}
	if cfg.Workspace != "" {
		ws, err := m.openWorkspace(ctx, cfg.Tenant, cfg.Workspace, true)
		if err != nil {
			return nil, err
		}
		st.files[control.DiskSlot(len(spec.Disks))] = ws
		spec.Disks = append(spec.Disks, control.Disk{Path: "workspace " + cfg.Workspace, Passed: true})
		spec.Cmdline += " cellvm.workspace=" + workspaceDisk
	}
	if in != nil {
		in.addDisks(&st)
	}
	if !policy.Empty() {
		if s.net, err = m.opt.Net.Attach(ctx, id, policy, m.attachOptions(cfg)...); err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		mac := s.net.MAC
		if from != nil && from.mac != nil {
			// The restored NIC is the snapshot's: the guest's driver
			// read its MAC at boot. Each TAP is a link of its own, so
			// forks sharing it never meet; the address is the fork's
			// (newMachine).
			mac = from.mac
		}
		spec.Net = &control.Net{MAC: mac.String()}
		spec.Cmdline += " " + s.net.KernelArgs()
		// The daemon opens the TAP and hands the VMM the descriptor: the
		// VMM needs neither /dev/net/tun nor CAP_NET_ADMIN.
		tap, err := netpolicy.OpenTAP(s.net.TAP)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		st.files[control.SlotTAP] = tap
	}
	if from != nil {
		if err := restoreFiles(from, &st); err != nil {
			return nil, err
		}
	}
	if m.opt.Jail != nil {
		var born *jail.Cgroup // the pooled process's: its VM's now
		if pooled != nil {
			born = pooled.takeCgroup()
		}
		if s.cgroup, err = m.opt.Jail.jailVM(id, s.dir, cid, spec, born); err != nil {
			return nil, fmt.Errorf("jail the VMM: %w", err)
		}
		st.cgroup = s.cgroup
		if in != nil && in.fsize > spec.Jail.Limits.FSize {
			spec.Jail.Limits.FSize = in.fsize // an image build's out disk
		}
	}
	spec.TestHooks = m.opt.TestHooks
	st.spawned = func(p *vmProc) {
		s.netMu.Lock()
		s.proc = p
		s.netMu.Unlock()
	}
	if from != nil {
		if err := markReseedPending(s.dir, agentclient.RenewAll); err != nil {
			return nil, err
		}
	}
	bootCtx, cancel := context.WithTimeout(ctx, m.opt.BootTimeout)
	defer cancel()
	start := time.Now()
	s.startSteps.Prepare = start.Sub(admitted)
	st.pooled, pooled = pooled, nil // startVMM's now
	var p *vmProc
	if p, s.agent, err = m.startVMM(ctx, s.dir, st, "booting"); err != nil {
		return nil, err
	}
	s.startSteps.Spawn, s.startSteps.Pooled = p.spawnTook, p.pooled
	s.startSteps.Agent = time.Since(start) - p.spawnTook
	renew := time.Now()
	if len(cfg.Env) > 0 && !(from != nil && maps.Equal(cfg.Env, from.env)) {
		// The guest's processes get the sandbox's env from its agent,
		// before the first cell starts the interpreter. A restored guest
		// whose interpreter runs starts a new one for it, so a fork whose
		// env is its snapshot's (the guest has it already) is not sent
		// it: its variables stay.
		if err := s.agent.SetEnv(bootCtx, cfg.Env); err != nil {
			return nil, fmt.Errorf("giving the guest its env: %w", err)
		}
	}
	if from != nil {
		if err := m.newMachine(ctx, s, agentclient.RenewAll); err != nil {
			return nil, err
		}
		os.Remove(filepath.Join(s.dir, reseedPendingFile))
	}
	s.startSteps.Renew = time.Since(renew)
	s.bootMS.Store(time.Since(start).Milliseconds())
	if err := m.initCheckpoints(s, from); err != nil {
		return nil, err
	}
	if _, err := s.lc.move(evBooted); err != nil {
		return nil, err // deleted while it booted (the manager's Close)
	}
	s.lastUsed.Store(time.Now().UnixNano())
	if !internal {
		go m.watch(s)
	}
	return s, nil
}

// watch marks a sandbox lost when its VMM process dies on its own (not
// when a pause ended it).
func (m *VMManager) watch(s *vmSandbox) {
	s.netMu.Lock()
	p := s.proc
	s.netMu.Unlock()
	<-p.done
	if !p.ended.Load() {
		m.markLost(s)
	}
}

// markLost moves a running or paused sandbox whose VMM has exited to
// StateLost and logs why with the ends of its VMM log and console: they are
// the only account of what happened, and deleting the sandbox removes them.
// Call it only after the VMM exited. It acts once per VMM process, and not
// for one a pause ended; a concurrent caller returns only when the first
// is done, so that whoever saw the VM go (a cell, a delete) never races
// the log against the sandbox's removal.
func (m *VMManager) markLost(s *vmSandbox) {
	s.netMu.Lock()
	p := s.proc
	s.netMu.Unlock()
	if p == nil || p.ended.Load() {
		return
	}
	p.exitSeen.Do(func() {
		{
			if _, err := s.lc.move(evVMExited); err == nil {
				why := p.lostInfo()
				why.Console = lostConsole(s.dir)
				msg := "sandbox lost: its VM exited"
				if v := s.violation.Load(); v != nil {
					why.KilledBy = sandbox.KilledByProtocol
					why.Reason = fmt.Sprintf("the guest broke the agent protocol (%v), so the host stopped its VM", *v)
					msg = "sandbox lost: the guest broke the agent protocol, so its VM was stopped"
				}
				s.lost.Store(&why)
				m.events.Publish(sandbox.Event{Type: sandbox.EventLost, Sandbox: s.id, Tenant: s.cfg.Tenant, Lost: &why, Egress: m.egressReport(s)})
				m.log.Warn(msg, "id", s.id, "error", p.err, "reason", why.Reason, "killed_by", why.KilledBy,
					"vmm_log", lastLines(readTail(filepath.Join(s.dir, vmmLogFile), 4096), 10),
					"console", lastLines(consoleTail(s.dir, 8192), 30))
				return
			}
		}
		// Refused: it was being deleted, stopped on purpose.
	})
}

// condemn stops the VM of a sandbox whose guest broke the agent protocol
// (agentclient.ErrProtocol: too much, more than announced, malformed):
// nothing it says can be believed any more, so nothing more is read from
// it. The VMM is killed at once and the sandbox reads lost, with the
// violation in the log; Delete removes the rest.
func (m *VMManager) condemn(s *vmSandbox, why error) {
	s.violation.CompareAndSwap(nil, &why)
	if s.proc != nil {
		s.proc.kill()
		<-s.proc.done
	}
	m.markLost(s)
}

// vmGone reports whether the sandbox's VMM has exited, waiting up to wait
// for it: a VM that is going down closes its agent connection a moment
// before its process ends.
func vmGone(s *vmSandbox, wait time.Duration) bool {
	if s.proc == nil {
		return false
	}
	select {
	case <-s.proc.done:
		return true
	default:
	}
	if wait <= 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-s.proc.done:
		return true
	case <-t.C:
		return false
	}
}

// lostGrace is how long a call whose agent stream ended waits for the VMM
// to exit before it reports an agent error instead of a lost sandbox.
const lostGrace = 3 * time.Second

// streamEnded reports whether err says the agent's connection ended, as it
// does when the VM goes down.
func streamEnded(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// destroy stops the VM and removes everything the sandbox had.
func (m *VMManager) destroy(s *vmSandbox) {
	s.abortPause() // a pause waits on its save for as long as it takes
	s.life.Lock()  // a pause or resume in progress ends first
	defer s.life.Unlock()
	s.stopFold() // after the lock: a pause that ended meanwhile started one
	if s.proc != nil {
		select {
		case <-s.proc.done: // died on its own before watch noticed: say so
			if !s.internal {
				m.markLost(s)
			}
		default:
		}
	}
	// A second destroy (the manager's Close meets a launch that fails
	// meanwhile) finds it deleting or deleted, and tears down again what
	// the launch made since: every step below is idempotent.
	s.lc.move(evDelete)
	defer s.lc.move(evDeleted)
	if s.proc != nil {
		if s.agent != nil && s.proc.alive() {
			ask, wait := 2*time.Second, 3*time.Second
			if s.cfg.Workspace != "" {
				// The guest's shutdown writes its page cache to the
				// workspace and unmounts it: worth waiting for.
				ask, wait = 10*time.Second, 30*time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), ask)
			s.agent.Shutdown(ctx)
			cancel()
			select {
			case <-s.proc.done:
			case <-time.After(wait):
				if s.cfg.Workspace != "" {
					m.log.Warn("the guest did not shut down in time; its last writes to the workspace may be lost (the journal keeps the volume consistent)", "id", s.id, "workspace", s.cfg.Workspace)
				}
			}
		}
		s.proc.stop(5 * time.Second)
	}
	if s.agent != nil {
		s.agent.Close()
	}
	if s.net != nil {
		if err := s.net.Close(); err != nil {
			m.log.Error("remove sandbox network", "id", s.id, "error", err)
		}
	}
	if err := s.cgroup.Close(); err != nil {
		m.log.Error("remove the VMM's cgroup", "id", s.id, "error", err)
	}
	if s.ck != nil {
		s.ck.close()
	}
	if err := os.RemoveAll(s.dir); err != nil {
		m.log.Error("remove sandbox directory", "id", s.id, "error", err)
	}
	m.mu.Lock()
	delete(m.sandboxes, s.id)
	m.mu.Unlock()
}

func (m *VMManager) get(id string) (*vmSandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sandboxes[id]
	if !ok || s.internal || s.State() == sandbox.StateStopping {
		return nil, fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, clip(id, 64))
	}
	return s, nil
}

// ready returns the sandbox if it can take a request now.
func (m *VMManager) ready(id string) (*vmSandbox, error) {
	s, err := m.get(id)
	if err != nil {
		return nil, err
	}
	switch s.State() {
	case sandbox.StateRunning:
		s.lastUsed.Store(time.Now().UnixNano())
		return s, nil
	case sandbox.StateLost:
		return nil, fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, id)
	case sandbox.StatePaused: // a call that needs the guest resumes it
		if err := m.autoResume(s); err != nil {
			return nil, err
		}
		s.lastUsed.Store(time.Now().UnixNano())
		return s, nil
	default:
		return nil, fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrBusy, id, s.State())
	}
}

// readyHeld is ready for a call that goes on beside cells (a command, an
// upload, a download): the sandbox is held (lifecycle.hold) so no pause
// or snapshot cuts the call, until release, which also marks it used.
func (m *VMManager) readyHeld(id string) (s *vmSandbox, release func(), err error) {
	for range 3 {
		if s, err = m.ready(id); err != nil {
			return nil, nil, err
		}
		r, from, ok := s.lc.hold()
		if ok {
			return s, func() {
				s.lastUsed.Store(time.Now().UnixNano())
				r()
			}, nil
		}
		if from == phaseSnapshotting {
			return nil, nil, fmt.Errorf("%w: a snapshot of sandbox %s is being taken; try again after it", sandbox.ErrBusy, id)
		}
		// Paused since ready looked: ready again waits and resumes.
	}
	return nil, nil, fmt.Errorf("%w: sandbox %s was paused again while the call waited for it", sandbox.ErrBusy, id)
}

// Delete implements Manager.
func (m *VMManager) Delete(ctx context.Context, id string) error {
	s, err := m.get(id)
	if err != nil {
		return err
	}
	if s.State() == sandbox.StateStarting {
		return fmt.Errorf("%w: sandbox %s is still starting", sandbox.ErrBusy, id)
	}
	m.destroy(s)
	m.log.Info("sandbox deleted", "id", id)
	m.events.Publish(sandbox.Event{Type: sandbox.EventDeleted, Sandbox: id, Tenant: s.cfg.Tenant, Reason: sandbox.DeletedByRequest, Egress: m.egressReport(s)})
	return nil
}

func (m *VMManager) info(s *vmSandbox) sandbox.Info {
	s.netMu.Lock()
	cfg, proc := s.cfg, s.proc
	s.netMu.Unlock()
	in := sandbox.Info{
		ID: s.id, State: s.State(), Config: cfg, CreatedAt: s.created,
		UptimeS: time.Since(s.created).Seconds(), Cells: int(s.cells.Load()), CellRunning: s.lc.phase() == phaseCell,
		BootMS: s.bootMS.Load(), QueuedMS: s.queuedMS.Load(), StartedFrom: s.startedFrom,
	}
	if proc != nil && proc.alive() {
		in.Usage = procUsage(proc.pid)
	}
	if s.net != nil {
		in.Network.AllowedPackets, in.Network.DroppedPackets = s.net.Counters()
	}
	in.Lost = s.lost.Load()
	return in
}

// Get implements Manager.
func (m *VMManager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	s, err := m.get(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return m.info(s), nil
}

// List implements Manager.
func (m *VMManager) List(ctx context.Context) ([]sandbox.Info, error) {
	m.mu.Lock()
	ss := make([]*vmSandbox, 0, len(m.sandboxes))
	for _, s := range m.sandboxes {
		if !s.internal {
			ss = append(ss, s)
		}
	}
	m.mu.Unlock()
	out := make([]sandbox.Info, 0, len(ss))
	for _, s := range ss {
		out = append(out, m.info(s))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// agentErr maps an agent or transport error onto the sentinels. A
// protocol violation condemns the sandbox.
func (m *VMManager) agentErr(s *vmSandbox, err error) error {
	if errors.Is(err, agentclient.ErrProtocol) {
		m.condemn(s, err)
		return fmt.Errorf("%w: sandbox %s's guest broke the agent protocol (%v); its VM was stopped", sandbox.ErrLost, s.id, err)
	}
	if errors.Is(err, agentclient.ErrTooLarge) {
		return fmt.Errorf("%w: %v", sandbox.ErrTooLarge, err)
	}
	var pe *proto.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case proto.CodeNotFound:
			return fmt.Errorf("%w: %s", sandbox.ErrNotFound, pe.Message)
		case proto.CodeBadPath, proto.CodeBadRequest:
			return fmt.Errorf("%w: %s", sandbox.ErrInvalid, pe.Message)
		case proto.CodeTooLarge:
			return fmt.Errorf("%w: %s", sandbox.ErrTooLarge, pe.Message)
		}
		return err
	}
	if !s.proc.alive() {
		return fmt.Errorf("%w: sandbox %s's VM exited", sandbox.ErrLost, s.id)
	}
	return err
}

// RunCell implements Manager.
func (m *VMManager) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	code, timeout := c.Code, c.Timeout
	if timeout <= 0 {
		return cell.Result{}, fmt.Errorf("%w: timeout must be positive", sandbox.ErrInvalid)
	}
	if len(code) > sandbox.MaxCodeBytes {
		return cell.Result{}, fmt.Errorf("%w: code is %d bytes, at most %d", sandbox.ErrTooLarge, len(code), sandbox.MaxCodeBytes)
	}
	sess, err := c.Session.Normalize()
	if err != nil {
		return cell.Result{}, err
	}
	s, err := m.ready(id)
	if err != nil {
		return cell.Result{}, err
	}
	if err := m.checkLanguage(s, sess.Language); err != nil {
		return cell.Result{}, err
	}
	if from, err := s.lc.move(evCellStart); err != nil {
		if from == phaseCell {
			return cell.Result{}, fmt.Errorf("%w: a cell is already running in sandbox %s", sandbox.ErrBusy, id)
		}
		return cell.Result{}, fmt.Errorf("%w: sandbox %s is %s; run the cell after it", sandbox.ErrBusy, id, from)
	}
	defer func() {
		s.lastUsed.Store(time.Now().UnixNano())
		s.lc.move(evCellEnd)
	}()
	s.cells.Add(1)
	start := time.Now()
	// The guest times the cell out itself; the host does not rely on it.
	callCtx, cancel := context.WithTimeout(ctx, timeout+m.opt.CallGrace)
	defer cancel()
	s.cellDeadline.Store(start.Add(timeout + m.opt.CallGrace).UnixNano())
	// With every-cell checkpoints the result's end event waits for the
	// checkpoint, which it names; without, what the guest says of
	// checkpoints in it is dropped.
	fwd, held := onEvent, (*cell.Event)(nil)
	if onEvent != nil {
		fwd = func(ev cell.Event) {
			if ev.Type == cell.EventEnd && s.everyCellOn() {
				held = &ev
				return
			}
			if ev.Type == cell.EventEnd && ev.End != nil {
				end := *ev.End
				end.Checkpoint, end.CheckpointError = 0, ""
				ev.End = &end
			}
			onEvent(ev)
		}
	}
	res, err := s.agent.RunSessionCell(callCtx, agentSession(sess), code, timeout, fwd)
	if err != nil {
		if ctx.Err() != nil {
			return cell.Result{}, ctx.Err()
		}
		end := func(r cell.Result) (cell.Result, error) {
			r.DurationMS = time.Since(start).Milliseconds()
			if onEvent != nil {
				onEvent(cell.Event{Type: cell.EventEnd, End: &r})
			}
			return r, nil
		}
		if errors.Is(err, agentclient.ErrProtocol) {
			m.condemn(s, err)
			return end(cell.Result{Status: cell.StatusLost,
				Stderr: fmt.Sprintf("cellvm: the guest broke the agent protocol (%v); its VM was stopped and the sandbox is lost\n", err)})
		}
		if callCtx.Err() != nil {
			m.log.Warn("guest did not answer a cell by its host deadline", "id", id, "timeout", timeout, "grace", m.opt.CallGrace)
			return end(hostDeadlineResult(timeout, m.opt.CallGrace))
		}
		// A VM going down ends the agent's stream first (EOF); give the
		// process a moment to end so that the result says "lost", not a
		// bare EOF.
		wait := time.Duration(0)
		if streamEnded(err) {
			wait = lostGrace
		}
		gone := vmGone(s, wait)
		if gone {
			m.markLost(s)
		}
		if gone {
			return end(cell.Result{Status: cell.StatusLost, StateKept: false,
				Stderr: "the sandbox's VM stopped while the cell ran; its state is gone"})
		}
		if errors.Is(err, io.ErrUnexpectedEOF) {
			// The VM runs: the guest's agent ended the cell's stream
			// (it could not send its output, or failed). The sandbox is
			// kept; what became of the cell's variables is not known, so
			// the result claims nothing kept.
			m.log.Warn("the guest's agent ended a cell's stream; the sandbox is kept", "id", id, "err", err)
			return end(cell.Result{Status: cell.StatusLost, StateKept: false,
				Stderr: "cellvm: the guest's agent ended this cell's stream before its result; the sandbox is kept, but this cell's output and whether its variables survived are unknown\n"})
		}
		if held != nil {
			onEvent(*held)
		}
		return cell.Result{}, m.agentErr(s, err)
	}
	// What the guest says of checkpoints is not believed: they are the
	// host's.
	res.Checkpoint, res.CheckpointError = m.everyCell(ctx, s, sandbox.CheckpointCell, codeSum(code))
	m.recordAfterFirstResult(s)
	if held != nil {
		held.End = &res
		onEvent(*held)
	}
	return res, nil
}

// Interrupt implements Manager.
func (m *VMManager) Interrupt(ctx context.Context, id string) error {
	s, err := m.ready(id)
	if err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, interruptDeadline)
	defer cancel()
	if _, err = s.agent.Interrupt(callCtx); err != nil {
		return m.deadlineErr(ctx, callCtx, "interrupt", interruptDeadline, m.agentErr(s, err))
	}
	return nil
}

// Host deadlines of the calls that have no timeout of their own: the
// guest answers an interrupt at once, and a restart within the
// interpreter's start-up timeout (30 s).
const (
	interruptDeadline = 10 * time.Second
	restartDeadline   = 60 * time.Second
)

// deadlineErr says that the guest did not answer op within d when the
// host's deadline (callCtx), not the caller (ctx), ended the call.
func (m *VMManager) deadlineErr(ctx, callCtx context.Context, op string, d time.Duration, err error) error {
	if ctx.Err() == nil && callCtx.Err() != nil && !errors.Is(err, sandbox.ErrLost) {
		return fmt.Errorf("the guest did not answer the %s within %v: %w", op, d, err)
	}
	return err
}

// Restart implements Manager.
func (m *VMManager) Restart(ctx context.Context, id string, ss sandbox.Session) error {
	sess, err := ss.Normalize()
	if err != nil {
		return err
	}
	s, err := m.ready(id)
	if err != nil {
		return err
	}
	if err := m.checkLanguage(s, sess.Language); err != nil {
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, restartDeadline)
	defer cancel()
	if err := s.agent.RestartSession(callCtx, agentSession(sess)); err != nil {
		return m.deadlineErr(ctx, callCtx, "restart", restartDeadline, m.agentErr(s, err))
	}
	return nil
}

// Exec implements Manager.
func (m *VMManager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	if err := req.Validate(); err != nil {
		return cell.ExecResult{}, err
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return cell.ExecResult{}, err
	}
	defer release()
	start := time.Now()
	callCtx, cancel := context.WithTimeout(ctx, req.Timeout+m.opt.CallGrace)
	defer cancel()
	r, err := s.agent.Exec(callCtx, req.Argv, req.Stdin, req.Timeout)
	if err != nil && ctx.Err() == nil && callCtx.Err() != nil && !errors.Is(err, agentclient.ErrProtocol) {
		m.log.Warn("guest did not answer a command by its host deadline", "id", id, "timeout", req.Timeout, "grace", m.opt.CallGrace)
		return cell.ExecResult{ExitCode: -1, TimedOut: true, DurationMS: time.Since(start).Milliseconds(),
			Stderr: hostDeadlineMessage("command", req.Timeout, m.opt.CallGrace) + "\n"}, nil
	}
	if err != nil {
		return cell.ExecResult{}, m.agentErr(s, err)
	}
	r.Checkpoint, r.CheckpointError = m.everyCell(ctx, s, sandbox.CheckpointExec, argvSum(req.Argv))
	return r, nil
}

// DefaultCallGrace is Options.CallGrace's default.
const DefaultCallGrace = 15 * time.Second

// hostDeadlineResult is a cell's result when the guest did not answer by
// the host's deadline. Whether the interpreter kept its state is unknown,
// so the result does not promise it.
func hostDeadlineResult(timeout, grace time.Duration) cell.Result {
	return cell.Result{Status: cell.StatusTimeout, KilledBy: cell.KilledByTimeout, StateKept: false,
		Error: &cell.Error{Name: "TimeoutError", Value: hostDeadlineMessage("cell", timeout, grace) + "; its variables may be gone"}}
}

func hostDeadlineMessage(what string, timeout, grace time.Duration) string {
	return fmt.Sprintf("cellvm: the guest did not answer within the %s's time limit (%v) plus %v, so the host stopped waiting", what, timeout, grace)
}

// limitReader fails with ErrTooLarge past n bytes instead of ending quietly.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, fmt.Errorf("%w: upload is larger than the limit", sandbox.ErrTooLarge)
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, fmt.Errorf("%w: upload is larger than the limit", sandbox.ErrTooLarge)
	}
	return n, err
}

// Upload implements Manager.
func (m *VMManager) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	p, err := sandbox.GuestPath(guestPath)
	if err != nil {
		return 0, err
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return 0, err
	}
	defer release()
	n, err := s.agent.Upload(ctx, p, &limitReader{r: r, n: m.opt.MaxUploadBytes}, 0o644)
	if err != nil {
		if errors.Is(err, sandbox.ErrTooLarge) {
			return n, err
		}
		return n, m.agentErr(s, err)
	}
	return n, nil
}

// Download implements Manager.
func (m *VMManager) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	p, err := sandbox.GuestPath(guestPath)
	if err != nil {
		return 0, err
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return 0, err
	}
	defer release()
	n, err := s.agent.Download(ctx, p, w, m.opt.MaxDownloadBytes)
	if err != nil {
		return n, m.agentErr(s, err)
	}
	return n, nil
}

// SetNetwork implements Manager.
func (m *VMManager) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	s, err := m.get(id)
	if err != nil {
		return err
	}
	pol, err := egress.Parse(p.Allow)
	if err != nil {
		return fmt.Errorf("%w: network: %v", sandbox.ErrInvalid, err)
	}
	if s.net == nil {
		if pol.Empty() {
			return nil
		}
		return fmt.Errorf("%w: sandbox %s was created without network and has no network device; create it with a network policy", sandbox.ErrNotSupported, id)
	}
	if err := m.setNetwork(s, pol); err != nil {
		return err
	}
	m.events.Publish(sandbox.Event{Type: sandbox.EventPolicyChanged, Sandbox: id, Tenant: s.cfg.Tenant, Network: &sandbox.NetworkPolicy{Allow: pol.Entries()}})
	return nil
}

// reapLoop deletes sandboxes past their TTL or idle timeout.
func (m *VMManager) reapLoop() {
	defer close(m.reapDone)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-m.stopReap:
			return
		case <-t.C:
		}
		m.mu.Lock()
		expired := map[*vmSandbox]string{}
		now := time.Now()
		for _, s := range m.sandboxes {
			if s.internal || s.State() == sandbox.StateStarting || s.State() == sandbox.StateStopping {
				continue
			}
			// A TTL holds whatever the sandbox is doing. A running cell
			// keeps a sandbox from being idle only until its host
			// deadline: a call stuck past it does not.
			// A command or a file transfer in progress is use too (it is
			// bounded by its own timeout, or by its caller's connection).
			busy := (s.lc.phase().busy() && now.UnixNano() < s.cellDeadline.Load()) || s.lc.held()
			if s.cfg.TTL > 0 && now.Sub(s.created) > s.cfg.TTL {
				expired[s] = sandbox.DeletedByTTL
			} else if s.cfg.IdleTimeout > 0 && !busy && now.Sub(time.Unix(0, s.lastUsed.Load())) > s.cfg.IdleTimeout {
				expired[s] = sandbox.DeletedByIdle
			}
		}
		m.mu.Unlock()
		m.pauseIdle(now)
		for s, why := range expired {
			m.log.Info("sandbox expired", "id", s.id, "reason", why)
			m.destroy(s)
			m.events.Publish(sandbox.Event{Type: sandbox.EventDeleted, Sandbox: s.id, Tenant: s.cfg.Tenant, Reason: why, Egress: m.egressReport(s)})
		}
	}
}

// Close destroys every sandbox.
func (m *VMManager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	m.mu.Unlock()
	m.admit.close() // starts waiting for a slot end now
	m.pool.close()  // its idle processes end; claimed ones are their VMs'
	close(m.stopReap)
	<-m.reapDone
	// The template builder ends its build, if any, and removes its VM.
	m.templates.Close()
	m.mu.Lock()
	ss := make([]*vmSandbox, 0, len(m.sandboxes))
	for _, s := range m.sandboxes {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.destroy(s)
			if !s.internal {
				m.events.Publish(sandbox.Event{Type: sandbox.EventDeleted, Sandbox: s.id, Tenant: s.cfg.Tenant, Reason: sandbox.DeletedByShutdown, Egress: m.egressReport(s)})
			}
		}()
	}
	wg.Wait()
	return nil
}

func readTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	f.ReadAt(b, off)
	return string(b)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// Owner implements sandbox.Owners: a sandbox's owner and machine, without
// its usage.
func (m *VMManager) Owner(ctx context.Context, id string) (sandbox.Summary, error) {
	s, err := m.get(id)
	if err != nil {
		return sandbox.Summary{}, err
	}
	return summaryOf(s), nil
}

// Summaries implements sandbox.Owners: List's sandboxes, without usage.
func (m *VMManager) Summaries(ctx context.Context) ([]sandbox.Summary, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]sandbox.Summary, 0, len(m.sandboxes))
	for _, s := range m.sandboxes {
		if !s.internal {
			out = append(out, summaryOf(s))
		}
	}
	return out, nil
}

// summaryOf reads the fields of s's config that never change.
func summaryOf(s *vmSandbox) sandbox.Summary {
	return sandbox.Summary{ID: s.id, Tenant: s.cfg.Tenant, VCPUs: s.cfg.VCPUs, MemoryMiB: s.cfg.MemoryMiB}
}
