package tenant

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Options configure a Manager.
type Options struct {
	// Quotas are every tenant's caps unless File says otherwise.
	Quotas Quotas
	// File is the operator's per-tenant settings (nil: none).
	File *File
	// CheckEgress checks a tenant's network allowlist against the
	// operator's egress rules (nil: no rules). Its error should wrap
	// sandbox.ErrInvalid and name the entry and the rule.
	CheckEgress func(tenant string, allow []string) error
	// Log receives refusals worth an operator's eye (quotas); nil
	// discards them.
	Log *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Manager is a sandbox.Manager that serves many tenants over one inner
// manager (see the package doc).
type Manager struct {
	inner sandbox.Manager
	// owners answers ownership and quota checks without reading usage
	// (nil: they go through Get and List).
	owners sandbox.Owners
	opt    Options
	log    *slog.Logger

	mu      sync.Mutex
	tenants map[string]*tenantState
}

// New wraps inner. It does not own inner: closing it stays the caller's.
func New(inner sandbox.Manager, opt Options) *Manager {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{inner: inner, owners: sandbox.OwnersOf(inner), opt: opt, log: log, tenants: map[string]*tenantState{}}
}

var _ sandbox.Manager = (*Manager)(nil)

// errNoCaller refuses a request whose front end did not say who calls.
var errNoCaller = errors.New("tenant: the request carries no caller (a front end must set sandbox.WithCaller); refused")

func caller(ctx context.Context) (sandbox.Caller, error) {
	c, ok := sandbox.CallerFrom(ctx)
	if !ok {
		return sandbox.Caller{}, errNoCaller
	}
	if c.Tenant != "" {
		if err := sandbox.CheckTenantName(c.Tenant); err != nil {
			return sandbox.Caller{}, err
		}
	}
	return c, nil
}

// all reports whether c sees every tenant and is bound by no quota.
func all(c sandbox.Caller) bool { return c.Operator && c.Tenant == "" }

// noSandbox is the answer for a sandbox that is missing or not the
// caller's: the same words either way.
func noSandbox(id string) error {
	return fmt.Errorf("%w: no sandbox %q", sandbox.ErrNotFound, clipString(id, 128))
}

func noSnapshot(id string) error {
	return fmt.Errorf("%w: no snapshot %q", sandbox.ErrNotFound, clipString(id, 128))
}

// own returns sandbox id's owner and machine when the caller may act on
// it, and the not-found answer otherwise (missing or another tenant's
// alike).
func (m *Manager) own(ctx context.Context, id string) (sandbox.Caller, sandbox.Summary, error) {
	c, err := caller(ctx)
	if err != nil {
		return c, sandbox.Summary{}, err
	}
	var sum sandbox.Summary
	if m.owners != nil {
		sum, err = m.owners.Owner(ctx, id)
	} else {
		var info sandbox.Info
		info, err = m.inner.Get(ctx, id)
		sum = sandbox.Summary{ID: info.ID, Tenant: info.Config.Tenant, VCPUs: info.Config.VCPUs, MemoryMiB: info.Config.MemoryMiB}
	}
	if errors.Is(err, sandbox.ErrNotFound) || err == nil && !c.Sees(sum.Tenant) {
		return c, sandbox.Summary{}, noSandbox(id)
	}
	return c, sum, err
}

// check runs own and drops what only it needs.
func (m *Manager) check(ctx context.Context, id string) error {
	_, _, err := m.own(ctx, id)
	return err
}

// Create implements sandbox.Manager: the sandbox is the caller's
// tenant's, a fork's snapshot must be the caller's, and the tenant's
// quotas and the operator's egress rules are checked first.
func (m *Manager) Create(ctx context.Context, cfg sandbox.Config) (sandbox.Info, error) {
	c, err := caller(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	if !all(c) {
		cfg.Tenant = sandbox.Owner(c.Tenant)
	} else if cfg.Tenant != "" {
		if err := sandbox.CheckTenantName(cfg.Tenant); err != nil {
			return sandbox.Info{}, err
		}
	}
	shape := cfg.WithDefaults() // what the quotas count
	if cfg.Snapshot != "" {
		if !sandbox.ValidSnapshotID(cfg.Snapshot) {
			return sandbox.Info{}, fmt.Errorf("%w: snapshot %q is not a snapshot id (snap- and 12 hex digits)", sandbox.ErrInvalid, clipString(cfg.Snapshot, 64))
		}
		snap, err := m.inner.GetSnapshot(ctx, cfg.Snapshot)
		if errors.Is(err, sandbox.ErrNotFound) || err == nil && !c.Sees(snap.Tenant) {
			return sandbox.Info{}, noSnapshot(cfg.Snapshot)
		}
		if err != nil {
			return sandbox.Info{}, err
		}
		if all(c) && cfg.Tenant == "" {
			cfg.Tenant = snap.Tenant // the operator's fork stays with the snapshot's owner
		}
		shape.VCPUs, shape.MemoryMiB = snap.VCPUs, snap.MemoryMiB // a fork has its snapshot's machine
	}
	if cfg.Checkpoint != nil {
		// A branch's parent must be the caller's: another tenant's
		// sandbox reads as missing, exactly as a missing one does.
		_, parent, err := m.own(ctx, cfg.Checkpoint.Sandbox)
		if err != nil {
			return sandbox.Info{}, err
		}
		if all(c) && cfg.Tenant == "" {
			cfg.Tenant = parent.Tenant
		}
		shape.VCPUs, shape.MemoryMiB = parent.VCPUs, parent.MemoryMiB // a branch has its parent's machine
	}
	// The operator's egress rules bind the operator too: the host
	// keeps the denied ranges closed whoever names them, so naming one
	// is refused here, clearly, rather than silently dropped there.
	if cfg.Network != nil && m.opt.CheckEgress != nil {
		if err := cfg.Network.Validate(); err != nil {
			return sandbox.Info{}, err
		}
		if err := m.opt.CheckEgress(sandbox.Owner(cfg.Tenant), cfg.Network.Allow); err != nil {
			return sandbox.Info{}, err
		}
	}
	var release func()
	if !all(c) {
		shape.Tenant, shape.Workspace = cfg.Tenant, cfg.Workspace
		if release, err = m.admit(ctx, shape); err != nil {
			m.log.Info("tenant: create refused by a quota", "tenant", cfg.Tenant, "error", err)
			return sandbox.Info{}, err
		}
		defer release()
	}
	info, err := m.inner.Create(ctx, cfg)
	if err != nil {
		return sandbox.Info{}, err
	}
	return info.Redacted(), nil
}

// List implements sandbox.Manager: the caller's tenant's sandboxes.
func (m *Manager) List(ctx context.Context) ([]sandbox.Info, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := m.inner.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Info, 0, len(infos))
	for _, info := range infos {
		if c.Sees(info.Config.Tenant) {
			out = append(out, info.Redacted())
		}
	}
	return out, nil
}

func (m *Manager) Get(ctx context.Context, id string) (sandbox.Info, error) {
	c, err := caller(ctx)
	if err != nil {
		return sandbox.Info{}, err
	}
	info, err := m.inner.Get(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) || err == nil && !c.Sees(info.Config.Tenant) {
		return sandbox.Info{}, noSandbox(id)
	}
	if err != nil {
		return sandbox.Info{}, err
	}
	return info.Redacted(), nil
}

func (m *Manager) Delete(ctx context.Context, id string) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.Delete(ctx, id)
}

func (m *Manager) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	if err := m.check(ctx, id); err != nil {
		return cell.Result{}, err
	}
	return m.inner.RunCell(ctx, id, c, onEvent)
}

func (m *Manager) Interrupt(ctx context.Context, id string) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.Interrupt(ctx, id)
}

func (m *Manager) Restart(ctx context.Context, id string, s sandbox.Session) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.Restart(ctx, id, s)
}

func (m *Manager) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	if err := m.check(ctx, id); err != nil {
		return cell.ExecResult{}, err
	}
	return m.inner.Exec(ctx, id, req)
}

func (m *Manager) Upload(ctx context.Context, id, guestPath string, r io.Reader) (int64, error) {
	if err := m.check(ctx, id); err != nil {
		return 0, err
	}
	return m.inner.Upload(ctx, id, guestPath, r)
}

func (m *Manager) Download(ctx context.Context, id, guestPath string, w io.Writer) (int64, error) {
	if err := m.check(ctx, id); err != nil {
		return 0, err
	}
	return m.inner.Download(ctx, id, guestPath, w)
}

// SetNetwork implements sandbox.Manager, checking the operator's egress
// rules for the sandbox's tenant.
func (m *Manager) SetNetwork(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	_, info, err := m.own(ctx, id)
	if err != nil {
		return err
	}
	if m.opt.CheckEgress != nil {
		if err := p.Validate(); err != nil {
			return err
		}
		if err := m.opt.CheckEgress(sandbox.Owner(info.Tenant), p.Allow); err != nil {
			return err
		}
	}
	return m.inner.SetNetwork(ctx, id, p)
}

func (m *Manager) Pause(ctx context.Context, id string) error {
	c, info, err := m.own(ctx, id)
	if err != nil {
		return err
	}
	if !all(c) {
		if err := m.diskRoom(ctx, info.Tenant, "pause"); err != nil {
			return err
		}
	}
	return m.inner.Pause(ctx, id)
}

func (m *Manager) Resume(ctx context.Context, id string) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.Resume(ctx, id)
}

func (m *Manager) Snapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	c, info, err := m.own(ctx, id)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	if !all(c) {
		if err := m.diskRoom(ctx, info.Tenant, "snapshot"); err != nil {
			return sandbox.SnapshotInfo{}, err
		}
	}
	return m.inner.Snapshot(ctx, id)
}

func (m *Manager) Logs(ctx context.Context, id string, req sandbox.LogRequest, onLine func(sandbox.LogLine) error) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.Logs(ctx, id, req, onLine)
}

func (m *Manager) ListSnapshots(ctx context.Context) ([]sandbox.SnapshotInfo, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	snaps, err := m.inner.ListSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.SnapshotInfo, 0, len(snaps))
	for _, s := range snaps {
		if c.Sees(s.Tenant) {
			out = append(out, s)
		}
	}
	return out, nil
}

func (m *Manager) GetSnapshot(ctx context.Context, id string) (sandbox.SnapshotInfo, error) {
	c, err := caller(ctx)
	if err != nil {
		return sandbox.SnapshotInfo{}, err
	}
	s, err := m.inner.GetSnapshot(ctx, id)
	if errors.Is(err, sandbox.ErrNotFound) || err == nil && !c.Sees(s.Tenant) {
		return sandbox.SnapshotInfo{}, noSnapshot(id)
	}
	return s, err
}

func (m *Manager) DeleteSnapshot(ctx context.Context, id string) error {
	if _, err := m.GetSnapshot(ctx, id); err != nil {
		return err
	}
	return m.inner.DeleteSnapshot(ctx, id)
}

// Workspaces implements sandbox.Manager: the caller's tenant's.
func (m *Manager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ws, err := m.inner.Workspaces(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.WorkspaceInfo, 0, len(ws))
	for _, w := range ws {
		if c.Sees(w.Tenant) {
			out = append(out, w)
		}
	}
	return out, nil
}

// DeleteWorkspace implements sandbox.Manager: the inner manager deletes
// the caller's tenant's workspace of that name (names are per tenant).
func (m *Manager) DeleteWorkspace(ctx context.Context, name string) error {
	if _, err := caller(ctx); err != nil {
		return err
	}
	return m.inner.DeleteWorkspace(ctx, name)
}

// Images implements sandbox.Manager: the operator's images, which every
// tenant sees, and the caller's tenant's.
func (m *Manager) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	imgs, err := m.inner.Images(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.ImageInfo, 0, len(imgs))
	for _, im := range imgs {
		if im.Tenant == "" || c.Sees(im.Tenant) {
			out = append(out, im)
		}
	}
	return out, nil
}

// DeleteImage implements sandbox.Manager. A tenant deletes only its own
// images: the operator's are ErrForbidden (they are visible to all, so
// refusing says nothing new), another tenant's ErrNotFound.
func (m *Manager) DeleteImage(ctx context.Context, name string) error {
	c, err := caller(ctx)
	if err != nil {
		return err
	}
	if !all(c) {
		imgs, err := m.inner.Images(ctx)
		if err != nil {
			return err
		}
		found := false
		for _, im := range imgs {
			if im.Name != name {
				continue
			}
			switch {
			case im.Tenant == "":
				return fmt.Errorf("%w: image %s is the operator's; only the operator can delete it", sandbox.ErrForbidden, name)
			case c.Sees(im.Tenant):
				found = true
			}
		}
		if !found {
			return fmt.Errorf("%w: no image %q", sandbox.ErrNotFound, clipString(name, 128))
		}
	}
	return m.inner.DeleteImage(ctx, name)
}

// Capacity implements sandbox.Manager. A tenant sees its own use against
// its own caps (the host's when lower); the operator sees the host's.
func (m *Manager) Capacity(ctx context.Context) (sandbox.Capacity, error) {
	c, err := caller(ctx)
	if err != nil {
		return sandbox.Capacity{}, err
	}
	host, err := m.inner.Capacity(ctx)
	if err != nil || all(c) {
		return host, err
	}
	use, err := m.usage(ctx, sandbox.Owner(c.Tenant))
	if err != nil {
		return sandbox.Capacity{}, err
	}
	q := m.quotas(c.Tenant)
	return sandbox.Capacity{
		MaxSandboxes:  lowerCap(host.MaxSandboxes, q.Sandboxes),
		Sandboxes:     use.sandboxes,
		MaxMemoryMiB:  lowerCap(host.MaxMemoryMiB, q.MemoryMiB),
		MemoryMiBUsed: use.memoryMiB,
		VCPUsUsed:     use.vcpus,
	}, nil
}

// lowerCap is the lower of two caps where 0 is none.
func lowerCap(a, b int) int {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// Events implements sandbox.Manager: the caller's tenant's events.
func (m *Manager) Events(ctx context.Context) (sandbox.EventStream, error) {
	c, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	st, err := m.inner.Events(ctx)
	if err != nil {
		return nil, err
	}
	if all(c) {
		return st, nil
	}
	return &eventFilter{EventStream: st, c: c}, nil
}

// eventFilter passes on the events of the caller's tenant's sandboxes,
// numbered anew (Seq counts this stream's events: the daemon's count
// would tell a tenant how busy the others are).
type eventFilter struct {
	sandbox.EventStream
	c   sandbox.Caller
	seq uint64
}

func (f *eventFilter) Next(ctx context.Context) (sandbox.Event, error) {
	for {
		ev, err := f.EventStream.Next(ctx)
		if err != nil {
			return ev, err
		}
		if f.c.Sees(ev.Tenant) {
			f.seq++
			ev.Seq = f.seq
			return ev, nil
		}
	}
}
