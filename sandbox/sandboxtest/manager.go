package sandboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Manager is the double. Its exported fields are its configuration: set
// them before the manager is shared, and do not change them after.
type Manager struct {
	// MaxSandboxes caps the sandboxes (0: none).
	MaxSandboxes int
	// MaxMemoryMiB caps the memory of all sandboxes together (0: none).
	MaxMemoryMiB int
	// MaxDiskMiB caps the memory of snapshots and paused sandboxes
	// together, which the VM manager writes to disk (0: none).
	MaxDiskMiB int
	// Script, when set, answers cells before the scripted ones and the
	// stand-in interpreter (see Script).
	Script Script
	// Node, when set, makes sandbox ids as a daemon with --node does:
	// sb-NODE-<12 hex>, the hex the sandbox's number (a router in front
	// of many daemons reads the node from the id).
	Node string
	// Lifetimes are the defaults and cap a create's TTL and idle timeout
	// get (Config.WithLifetimes), as the VM manager's options give them.
	// The zero value gives none.
	Lifetimes sandbox.Lifetimes

	events sandbox.EventHub

	mu sync.Mutex
	// changed is broadcast when a log grows or a sandbox goes, for Logs.
	changed    *sync.Cond
	next       int // the last number given to a sandbox or a snapshot
	boxes      map[string]*box
	snaps      map[string]*snap
	workspaces map[wsKey]*workspace
	images     map[string]sandbox.ImageInfo
	// making holds the names of images being made.
	making   map[string]bool
	fail     map[string]error
	calls    []string
	happened []string
	deleted  []string
	// checkpointsMade counts checkpoints, for their times.
	checkpointsMade int
}

// box is a sandbox.
type box struct {
	// info is what Get answers; info.CellRunning is the busy flag.
	info sandbox.Info
	// sessions hold each session's variables (contexts.go).
	sessions sessions
	// contextsMade counts the contexts made up names for.
	contextsMade int
	files        map[string][]byte
	// ws is the workspace the box holds, if any: its /workspace files.
	ws *workspace
	// release wakes a "gate" cell; Interrupt sends on it.
	release chan struct{}
	logs    map[sandbox.LogSource][]string
	// checkpoints are the kept ones, oldest first (checkpoints.go).
	checkpoints []*checkpoint
}

// epoch is the fake's clock: every sandbox is created at it, and
// snapshots and workspaces a second per number after it.
var epoch = time.Unix(1700000000, 0).UTC()

// The caps New sets.
const (
	defaultMaxMemoryMiB = 32 << 10
	defaultMaxDiskMiB   = 4 << 10
)

// New returns an empty manager with the images "default", "team" and
// "scratch", MaxMemoryMiB 32768 and MaxDiskMiB 4096.
func New() *Manager {
	m := &Manager{
		MaxMemoryMiB: defaultMaxMemoryMiB,
		MaxDiskMiB:   defaultMaxDiskMiB,
		boxes:        map[string]*box{},
		snaps:        map[string]*snap{},
		workspaces:   map[wsKey]*workspace{},
		images:       startImages(),
		making:       map[string]bool{},
		fail:         map[string]error{},
	}
	m.changed = sync.NewCond(&m.mu)
	return m
}

// Fail makes every later call of the Manager method named op (as
// "Create" or "Pause") return err, before it does anything else; a nil
// err ends that.
func (m *Manager) Fail(op string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.fail, op)
		return
	}
	m.fail[op] = err
}

// Calls returns the calls the manager received, in order, each as its
// method's name and its arguments ("Create", "Get sb-fake1",
// "RunCell sb-fake1 \"x = 1\"", "Upload sb-fake1 /workspace/a").
func (m *Manager) Calls() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.calls)
}

// Happened returns what the manager did, in order: "create sb-fake1",
// "create sb-fake2 image team", "pause sb-fake1", "resume sb-fake1 (by a
// call)", "snapshot sb-fake1 snap-...", "make workspace w", "delete
// image scratch", "hang sb-fake1: the client went away", and the like.
func (m *Manager) Happened() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.happened)
}

// Live returns the number of sandboxes not deleted.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.boxes)
}

// Deleted returns the ids of the deleted sandboxes, in order.
func (m *Manager) Deleted() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deleted)
}

// enter records a call and returns the error Fail set for op, if any.
func (m *Manager) enter(op string, args ...string) error {
	if err := m.enterLocked(op, args...); err != nil {
		return err
	}
	m.mu.Unlock()
	return nil
}

// enterLocked is enter that, when it returns nil, leaves m.mu held for
// the caller to unlock.
func (m *Manager) enterLocked(op string, args ...string) error {
	m.mu.Lock()
	m.calls = append(m.calls, strings.Join(append([]string{op}, args...), " "))
	if err := m.fail[op]; err != nil {
		m.mu.Unlock()
		return err
	}
	return nil
}

// note records what happened; the caller holds m.mu.
func (m *Manager) note(format string, args ...any) {
	m.happened = append(m.happened, fmt.Sprintf(format, args...))
}

// find returns sandbox id, whatever its state; the caller holds m.mu.
func (m *Manager) find(id string) (*box, error) {
	b, ok := m.boxes[id]
	if !ok {
		return nil, fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, id)
	}
	return b, nil
}

// usable returns sandbox id for a call that needs its guest: a lost one
// is refused, and a paused one resumed, as the VM manager resumes one.
// The caller holds m.mu.
func (m *Manager) usable(id string) (*box, error) {
	b, err := m.find(id)
	if err != nil {
		return nil, err
	}
	switch b.info.State {
	case sandbox.StateLost:
		return nil, fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, id)
	case sandbox.StatePaused:
		b.info.State = sandbox.StateRunning
		m.note("resume %s (by a call)", id)
		m.events.Publish(sandbox.Event{Type: sandbox.EventResumed, Sandbox: id, Tenant: b.info.Config.Tenant})
	}
	return b, nil
}

// withBox runs fn on usable sandbox id under m.mu.
func (m *Manager) withBox(id string, fn func(*box) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := m.usable(id)
	if err != nil {
		return err
	}
	return fn(b)
}

// notSupportedHost in a network policy makes the manager refuse it as
// not supported.
const notSupportedHost = "not-supported.test"

func (m *Manager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	if err := m.enterLocked("Create"); err != nil {
		return sandbox.Info{}, err
	}
	defer m.mu.Unlock()
	var from *snap
	var branch *checkpoint
	if cfg.Snapshot != "" {
		var err error
		if cfg, from, err = m.forkConfig(cfg); err != nil {
			return sandbox.Info{}, err
		}
	} else if cfg.Checkpoint != nil {
		var err error
		if cfg, branch, err = m.branchConfig(cfg); err != nil {
			return sandbox.Info{}, err
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return sandbox.Info{}, err
	}
	cfg, err := cfg.WithLifetimes(m.Lifetimes)
	if err != nil {
		return sandbox.Info{}, err
	}
	if err := m.capsAllow(cfg); err != nil {
		return sandbox.Info{}, err
	}
	if cfg.Network != nil && slices.Contains(cfg.Network.Allow, notSupportedHost) {
		return sandbox.Info{}, fmt.Errorf("%w: this manager has no network policy support", sandbox.ErrNotSupported)
	}
	if err := m.checkImage(cfg); err != nil {
		return sandbox.Info{}, err
	}
	id := fmt.Sprintf("sb-fake%d", m.next+1)
	if m.Node != "" {
		id = fmt.Sprintf("sb-%s-%012x", m.Node, m.next+1)
	}
	ws, err := m.holdWorkspace(cfg.Tenant, cfg.Workspace, id)
	if err != nil {
		return sandbox.Info{}, err
	}
	m.next++
	b := &box{
		info: sandbox.Info{ID: id, State: sandbox.StateRunning, Config: cfg, CreatedAt: epoch,
			BootMS: 42, StartedFrom: startedFrom(cfg)},
		sessions: newSessions(),
		files:    map[string][]byte{},
		ws:       ws,
		release:  make(chan struct{}, 1),
		logs:     map[sandbox.LogSource][]string{},
	}
	if from != nil {
		b.sessions, b.files = from.copyState()
	}
	if branch != nil {
		b.sessions, b.files = branch.sessions.clone(), maps.Clone(branch.files)
		b.info.Cells, b.contextsMade = branch.cells, branch.contextsMade
	}
	m.boxes[id] = b
	switch {
	case branch != nil:
		m.note("create %s branch of %s checkpoint %d", id, cfg.Checkpoint.Sandbox, cfg.Checkpoint.N)
	case cfg.Image != "":
		m.note("create %s image %s", id, cfg.Image)
	default:
		m.note("create %s", id)
	}
	m.events.Publish(sandbox.Event{Type: sandbox.EventCreated, Sandbox: id, Tenant: cfg.Tenant})
	return b.info, nil
}

// capsAllow refuses a sandbox of cfg past the caps on sandboxes and
// memory; the caller holds m.mu.
func (m *Manager) capsAllow(cfg sandbox.Config) error {
	if m.MaxSandboxes > 0 && len(m.boxes) >= m.MaxSandboxes {
		return fmt.Errorf("%w: %d sandboxes, the cap is %d", sandbox.ErrFull, len(m.boxes), m.MaxSandboxes)
	}
	if used := m.memoryUsed(); m.MaxMemoryMiB > 0 && used+cfg.MemoryMiB > m.MaxMemoryMiB {
		return fmt.Errorf("%w: %d MiB more would pass the cap of %d MiB (%d used)", sandbox.ErrFull, cfg.MemoryMiB, m.MaxMemoryMiB, used)
	}
	return nil
}

// memoryUsed is the memory of every sandbox; the caller holds m.mu.
func (m *Manager) memoryUsed() int {
	n := 0
	for _, b := range m.boxes {
		n += b.info.Config.MemoryMiB
	}
	return n
}

func (m *Manager) List(ctx context.Context) ([]sandbox.Info, error) {
	if err := m.enterLocked("List"); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	var out []sandbox.Info
	for _, b := range m.boxes {
		out = append(out, b.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (m *Manager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	if err := m.enterLocked("Get", id); err != nil {
		return sandbox.Info{}, err
	}
	defer m.mu.Unlock()
	b, err := m.find(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.info, nil
}

func (m *Manager) Delete(ctx context.Context, id string) error {
	if err := m.enterLocked("Delete", id); err != nil {
		return err
	}
	defer m.mu.Unlock()
	b, err := m.find(id)
	if err != nil {
		return err
	}
	m.releaseWorkspace(b)
	delete(m.boxes, id)
	m.deleted = append(m.deleted, id)
	m.note("delete %s", id)
	m.changed.Broadcast()
	ev := sandbox.Event{Type: sandbox.EventDeleted, Sandbox: id, Reason: sandbox.DeletedByRequest, Tenant: b.info.Config.Tenant}
	if b.info.Config.Network != nil {
		ev.Egress = &sandbox.EgressReport{AllowedPackets: b.info.Network.AllowedPackets, DroppedPackets: b.info.Network.DroppedPackets}
	}
	m.events.Publish(ev)
	return nil
}

var _ sandbox.Manager = (*Manager)(nil)

// Owner implements sandbox.Owners.
func (m *Manager) Owner(ctx context.Context, id string) (sandbox.Summary, error) {
	if err := m.enterLocked("Owner", id); err != nil {
		return sandbox.Summary{}, err
	}
	defer m.mu.Unlock()
	b, err := m.find(id)
	if err != nil {
		return sandbox.Summary{}, err
	}
	return summaryOf(b.info), nil
}

// Summaries implements sandbox.Owners.
func (m *Manager) Summaries(ctx context.Context) ([]sandbox.Summary, error) {
	if err := m.enterLocked("Summaries"); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	out := make([]sandbox.Summary, 0, len(m.boxes))
	for _, b := range m.boxes {
		out = append(out, summaryOf(b.info))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func summaryOf(i sandbox.Info) sandbox.Summary {
	return sandbox.Summary{ID: i.ID, Tenant: i.Config.Tenant, VCPUs: i.Config.VCPUs, MemoryMiB: i.Config.MemoryMiB}
}

var _ sandbox.Owners = (*Manager)(nil)
