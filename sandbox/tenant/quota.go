package tenant

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellvm/cellvm/sandbox"
)

// Quotas are checked before anything is made. Creates in flight hold a
// reservation (their vCPUs and memory) from the check until the inner
// Create returns, so two creates racing past one cap cannot both pass:
// the check counts what the inner manager lists plus what is reserved.
// Once a create returns its sandbox is in the list, and its reservation
// is dropped.

// tenantState is one tenant's creates in flight and its create rate.
type tenantState struct {
	pending []reservation
	// images counts the tenant's image creates in flight.
	images    int
	creates   *rate.Limiter
	perMinute int
}

type reservation struct{ vcpus, memoryMiB int }

// quotaError is ErrQuota naming the cap, with when to retry.
type quotaError struct {
	msg        string
	retryAfter time.Duration
}

func (e *quotaError) Error() string             { return sandbox.ErrQuota.Error() + ": " + e.msg }
func (e *quotaError) Unwrap() error             { return sandbox.ErrQuota }
func (e *quotaError) RetryAfter() time.Duration { return e.retryAfter }
func quotaf(retry time.Duration, f string, a ...any) error {
	return &quotaError{msg: fmt.Sprintf(f, a...), retryAfter: retry}
}

// quotas returns tenant's caps.
func (m *Manager) quotas(tenant string) Quotas {
	return m.opt.File.For(tenant).Apply(m.opt.Quotas)
}

// state returns tenant's state, made on first use. Caller holds m.mu.
func (m *Manager) state(tenant string, q Quotas) *tenantState {
	st := m.tenants[tenant]
	if st == nil {
		st = &tenantState{}
		m.tenants[tenant] = st
	}
	if st.perMinute != q.CreatesPerMinute {
		st.perMinute = q.CreatesPerMinute
		st.creates = nil
		if q.CreatesPerMinute > 0 {
			st.creates = rate.NewLimiter(rate.Every(time.Minute/time.Duration(q.CreatesPerMinute)), q.CreatesPerMinute)
		}
	}
	return st
}

// use is what one tenant's sandboxes hold.
type use struct {
	sandboxes, vcpus, memoryMiB int
}

// usage sums tenant's sandboxes as the inner manager lists them.
func (m *Manager) usage(ctx context.Context, tenant string) (use, error) {
	var sums []sandbox.Summary
	if m.owners != nil {
		var err error
		if sums, err = m.owners.Summaries(ctx); err != nil {
			return use{}, err
		}
	} else {
		infos, err := m.inner.List(ctx)
		if err != nil {
			return use{}, err
		}
		for _, info := range infos {
			sums = append(sums, sandbox.Summary{ID: info.ID, Tenant: info.Config.Tenant, VCPUs: info.Config.VCPUs, MemoryMiB: info.Config.MemoryMiB})
		}
	}
	var u use
	for _, s := range sums {
		if sandbox.Owner(s.Tenant) == tenant {
			u.sandboxes++
			u.vcpus += s.VCPUs
			u.memoryMiB += s.MemoryMiB
		}
	}
	return u, nil
}

// admit checks cfg's tenant's caps for one more sandbox of cfg's shape
// and reserves it; release drops the reservation.
func (m *Manager) admit(ctx context.Context, cfg sandbox.Config) (release func(), err error) {
	tenant := sandbox.Owner(cfg.Tenant)
	q := m.quotas(tenant)
	if cfg.Workspace != "" && q.DiskMiB > 0 {
		if err := m.workspaceRoom(ctx, tenant, cfg.Workspace, q); err != nil {
			return nil, err
		}
	}
	u, err := m.usage(ctx, tenant)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state(tenant, q)
	for _, r := range st.pending {
		u.sandboxes++
		u.vcpus += r.vcpus
		u.memoryMiB += r.memoryMiB
	}
	switch {
	case q.Sandboxes > 0 && u.sandboxes+1 > q.Sandboxes:
		return nil, quotaf(30*time.Second, "tenant %s has %d sandboxes, its cap is %d (max_sandboxes); delete one first", tenant, u.sandboxes, q.Sandboxes)
	case q.VCPUs > 0 && u.vcpus+cfg.VCPUs > q.VCPUs:
		return nil, quotaf(30*time.Second, "tenant %s's sandboxes have %d vCPUs, %d more would pass its cap of %d (max_vcpus)", tenant, u.vcpus, cfg.VCPUs, q.VCPUs)
	case q.MemoryMiB > 0 && u.memoryMiB+cfg.MemoryMiB > q.MemoryMiB:
		return nil, quotaf(30*time.Second, "tenant %s's sandboxes have %d MiB, %d MiB more would pass its cap of %d MiB (max_memory_mib)", tenant, u.memoryMiB, cfg.MemoryMiB, q.MemoryMiB)
	}
	if st.creates != nil {
		now := m.opt.Now()
		r := st.creates.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			r.CancelAt(now)
			return nil, quotaf(d, "tenant %s made %d sandboxes in the last minute, its cap (creates_per_minute)", tenant, q.CreatesPerMinute)
		}
	}
	res := reservation{vcpus: cfg.VCPUs, memoryMiB: cfg.MemoryMiB}
	st.pending = append(st.pending, res)
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		for i, r := range st.pending {
			if r == res {
				st.pending = append(st.pending[:i], st.pending[i+1:]...)
				break
			}
		}
	}, nil
}

// diskUse sums what tenant's snapshots, workspaces and images take on
// disk.
func (m *Manager) diskUse(ctx context.Context, tenant string) (int64, error) {
	var n int64
	snaps, err := m.inner.ListSnapshots(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range snaps {
		if sandbox.Owner(s.Tenant) == tenant {
			n += s.SizeBytes
		}
	}
	ws, err := m.inner.Workspaces(ctx)
	if err != nil {
		return 0, err
	}
	for _, w := range ws {
		if sandbox.Owner(w.Tenant) == tenant {
			n += w.DiskBytes
		}
	}
	imgs, err := m.inner.Images(ctx)
	if err != nil {
		return 0, err
	}
	for _, im := range imgs {
		// An image without a tenant is the operator's.
		if im.Tenant != "" && sandbox.Owner(im.Tenant) == tenant {
			n += im.SizeBytes
		}
	}
	return n, nil
}

// diskRoom refuses a snapshot, a pause or an image (what) once
// tenant's snapshots, workspaces and images take its disk cap.
func (m *Manager) diskRoom(ctx context.Context, tenant, what string) error {
	tenant = sandbox.Owner(tenant)
	q := m.quotas(tenant)
	if q.DiskMiB <= 0 {
		return nil
	}
	n, err := m.diskUse(ctx, tenant)
	if err != nil {
		return err
	}
	if n >= q.DiskMiB<<20 {
		return quotaf(time.Minute, "tenant %s's snapshots, workspaces and images take %d MiB, its cap is %d MiB (max_disk_mib); delete some before another %s",
			tenant, n>>20, q.DiskMiB, what)
	}
	return nil
}

// workspaceRoom refuses a create that would make a new workspace once
// tenant's disk cap is taken; one that exists can be mounted again.
func (m *Manager) workspaceRoom(ctx context.Context, tenant, name string, q Quotas) error {
	ws, err := m.inner.Workspaces(ctx)
	if err != nil {
		return err
	}
	for _, w := range ws {
		if w.Name == name && sandbox.Owner(w.Tenant) == tenant {
			return nil
		}
	}
	return m.diskRoom(ctx, tenant, "workspace")
}
