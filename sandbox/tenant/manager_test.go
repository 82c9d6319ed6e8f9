package tenant_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/metrics"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

func as(t string) context.Context {
	return sandbox.WithCaller(context.Background(), sandbox.Caller{Tenant: t, TokenID: "t-" + t})
}

var operator = sandbox.WithCaller(context.Background(), sandbox.Caller{Operator: true, Peer: "uid:0"})

func newPair(t *testing.T, opt tenant.Options) (*tenant.Manager, *sandboxtest.Manager) {
	t.Helper()
	inner := sandboxtest.New()
	return tenant.New(inner, opt), inner
}

// TestAnotherTenantsSandboxIsMissing checks every per-sandbox call of
// beta on alpha's sandbox answers exactly what a missing sandbox does,
// and that alpha's sandbox is untouched afterwards.
func TestAnotherTenantsSandboxIsMissing(t *testing.T) {
	m, inner := newPair(t, tenant.Options{})
	alpha, beta := as("alpha"), as("beta")
	info, err := m.Create(alpha, sandbox.Config{Tenant: "beta", Env: map[string]string{"SECRET": "hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Tenant != "alpha" {
		t.Fatalf("alpha's create is owned by %q: the request's tenant must not count", info.Config.Tenant)
	}
	if _, err := m.RunCell(alpha, info.ID, sandbox.Cell{Code: "x = 41", Timeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(alpha, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	const missing = "sb-fake999"
	calls := map[string]func(ctx context.Context, id string) error{
		"get": func(ctx context.Context, id string) error { _, err := m.Get(ctx, id); return err },
		"cells": func(ctx context.Context, id string) error {
			_, err := m.RunCell(ctx, id, sandbox.Cell{Code: "x = 0", Timeout: time.Second}, nil)
			return err
		},
		"interrupt": func(ctx context.Context, id string) error { return m.Interrupt(ctx, id) },
		"restart":   func(ctx context.Context, id string) error { return m.Restart(ctx, id, sandbox.Session{}) },
		"exec": func(ctx context.Context, id string) error {
			_, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"true"}, Timeout: time.Second})
			return err
		},
		"upload": func(ctx context.Context, id string) error {
			_, err := m.Upload(ctx, id, "/tmp/x", strings.NewReader("x"))
			return err
		},
		"download": func(ctx context.Context, id string) error {
			_, err := m.Download(ctx, id, "/tmp/x", &bytes.Buffer{})
			return err
		},
		"network": func(ctx context.Context, id string) error {
			return m.SetNetwork(ctx, id, sandbox.NetworkPolicy{Allow: []string{"1.1.1.1"}})
		},
		"logs": func(ctx context.Context, id string) error {
			return m.Logs(ctx, id, sandbox.LogRequest{Source: sandbox.LogConsole}, func(sandbox.LogLine) error { return nil })
		},
		"pause":    func(ctx context.Context, id string) error { return m.Pause(ctx, id) },
		"resume":   func(ctx context.Context, id string) error { return m.Resume(ctx, id) },
		"snapshot": func(ctx context.Context, id string) error { _, err := m.Snapshot(ctx, id); return err },
		"delete":   func(ctx context.Context, id string) error { return m.Delete(ctx, id) },
	}
	before := len(inner.Calls())
	for name, call := range calls {
		errTheirs := call(beta, info.ID)
		errNone := call(beta, missing)
		if !errors.Is(errTheirs, sandbox.ErrNotFound) {
			t.Errorf("%s of alpha's sandbox as beta: %v, want not found", name, errTheirs)
			continue
		}
		if strings.ReplaceAll(errTheirs.Error(), info.ID, "ID") != strings.ReplaceAll(errNone.Error(), missing, "ID") {
			t.Errorf("%s: beta can tell alpha's sandbox from a missing one: %q vs %q", name, errTheirs, errNone)
		}
	}
	for _, c := range inner.Calls()[before:] {
		if !strings.HasPrefix(c, "Get ") && !strings.HasPrefix(c, "Owner ") {
			t.Errorf("beta's refused calls reached the inner manager: %s", c)
		}
	}
	// Snapshots: beta can neither see, fork nor delete alpha's.
	if _, err := m.GetSnapshot(beta, snap.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("beta gets alpha's snapshot: %v", err)
	}
	if err := m.DeleteSnapshot(beta, snap.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("beta deletes alpha's snapshot: %v", err)
	}
	if _, err := m.Create(beta, sandbox.Config{Snapshot: snap.ID}); !errors.Is(err, sandbox.ErrNotFound) ||
		!strings.Contains(err.Error(), "no snapshot") {
		t.Errorf("beta forks alpha's snapshot: %v", err)
	}
	if l, _ := m.ListSnapshots(beta); len(l) != 0 {
		t.Errorf("beta lists alpha's snapshots: %+v", l)
	}
	if l, _ := m.List(beta); len(l) != 0 {
		t.Errorf("beta lists alpha's sandboxes: %+v", l)
	}
	// Alpha's sandbox answers with its state still.
	got, err := m.Get(alpha, info.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("alpha's sandbox after beta's attempts: %+v %v", got, err)
	}
	res, err := m.RunCell(alpha, info.ID, sandbox.Cell{Code: "print(x)", Timeout: time.Second}, nil)
	if err != nil || res.Status != "ok" || res.Stdout != "41\n" {
		t.Fatalf("alpha's variables after beta's attempts: %+v %v", res, err)
	}
	if l, _ := m.ListSnapshots(alpha); len(l) != 1 {
		t.Errorf("alpha lists %d snapshots, want 1", len(l))
	}
	// Alpha forks its own.
	fork, err := m.Create(alpha, sandbox.Config{Snapshot: snap.ID})
	if err != nil || fork.Config.Tenant != "alpha" {
		t.Fatalf("alpha's fork: %+v %v", fork, err)
	}
	// The operator sees both.
	if l, _ := m.List(operator); len(l) != 2 {
		t.Errorf("the operator lists %d sandboxes, want 2", len(l))
	}
}

func TestEnvValuesNeverComeBack(t *testing.T) {
	m, _ := newPair(t, tenant.Options{})
	ctx := as("alpha")
	info, err := m.Create(ctx, sandbox.Config{Env: map[string]string{"TOKEN": "s3cr3t-value", "A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := m.Get(ctx, info.ID)
	list, _ := m.List(ctx)
	opList, _ := m.List(operator)
	for _, i := range append([]sandbox.Info{info, got}, append(list, opList...)...) {
		if len(i.Config.Env) != 0 {
			t.Errorf("env values came back: %+v", i.Config.Env)
		}
		if fmt.Sprint(i.EnvNames) != "[A TOKEN]" {
			t.Errorf("env names %v, want [A TOKEN]", i.EnvNames)
		}
	}
}

func TestWorkspacesArePerTenant(t *testing.T) {
	m, _ := newPair(t, tenant.Options{})
	alpha, beta := as("alpha"), as("beta")
	a, err := m.Create(alpha, sandbox.Config{Workspace: "data"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Upload(alpha, a.ID, "/workspace/secret.txt", strings.NewReader("alpha's")); err != nil {
		t.Fatal(err)
	}
	// Beta's "data" is another volume: free to mount while alpha holds
	// alpha's, and empty.
	b, err := m.Create(beta, sandbox.Config{Workspace: "data"})
	if err != nil {
		t.Fatalf("beta's data workspace: %v (alpha's must not hold it)", err)
	}
	if _, err := m.Download(beta, b.ID, "/workspace/secret.txt", &bytes.Buffer{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("beta reads alpha's workspace file: %v", err)
	}
	ws, _ := m.Workspaces(beta)
	if len(ws) != 1 || ws[0].Tenant != "beta" || ws[0].Sandbox != b.ID {
		t.Errorf("beta's workspaces: %+v", ws)
	}
	if err := m.Delete(beta, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteWorkspace(beta, "data"); err != nil {
		t.Fatalf("beta deletes its data: %v", err)
	}
	// Alpha's is still there, held.
	ws, _ = m.Workspaces(alpha)
	if len(ws) != 1 || ws[0].Sandbox != a.ID {
		t.Errorf("alpha's workspaces after beta deleted its own: %+v", ws)
	}
}

func TestNoCallerIsRefused(t *testing.T) {
	m, inner := newPair(t, tenant.Options{})
	if _, err := m.Create(context.Background(), sandbox.Config{}); err == nil {
		t.Fatal("a create without a caller passed")
	}
	if _, err := m.List(context.Background()); err == nil {
		t.Fatal("a list without a caller passed")
	}
	if inner.Live() != 0 {
		t.Fatal("a refused create made a sandbox")
	}
}

func TestQuotas(t *testing.T) {
	file := &tenant.File{Tenants: map[string]tenant.Settings{"big": {Sandboxes: new(int)}}}
	for _, tc := range []struct {
		name  string
		q     tenant.Quotas
		cfg   sandbox.Config
		first int // creates that pass
		cap   string
	}{
		{"sandboxes", tenant.Quotas{Sandboxes: 2}, sandbox.Config{}, 2, "max_sandboxes"},
		{"vcpus", tenant.Quotas{VCPUs: 4}, sandbox.Config{VCPUs: 2}, 2, "max_vcpus"},
		{"memory", tenant.Quotas{MemoryMiB: 1024}, sandbox.Config{MemoryMiB: 512}, 2, "max_memory_mib"},
		{"rate", tenant.Quotas{CreatesPerMinute: 3}, sandbox.Config{}, 3, "creates_per_minute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1e9, 0)
			m, inner := newPair(t, tenant.Options{Quotas: tc.q, File: file, Now: func() time.Time { return now }})
			for i := 0; i < tc.first; i++ {
				if _, err := m.Create(as("alpha"), tc.cfg); err != nil {
					t.Fatalf("create %d: %v", i+1, err)
				}
			}
			_, err := m.Create(as("alpha"), tc.cfg)
			if !errors.Is(err, sandbox.ErrQuota) || !strings.Contains(err.Error(), tc.cap) {
				t.Fatalf("one past the cap: %v, want ErrQuota naming %s", err, tc.cap)
			}
			if d, ok := sandbox.RetryAfter(err); !ok || d <= 0 {
				t.Errorf("no Retry-After in %v", err)
			}
			if inner.Live() != tc.first {
				t.Errorf("%d sandboxes after the refusal, want %d: a refused create made something", inner.Live(), tc.first)
			}
			// Another tenant has its own caps; the operator none.
			if _, err := m.Create(as("beta"), tc.cfg); err != nil {
				t.Errorf("beta is held by alpha's use: %v", err)
			}
			if _, err := m.Create(operator, tc.cfg); err != nil {
				t.Errorf("the operator is held by a tenant's quota: %v", err)
			}
			if tc.name == "sandboxes" {
				// The file's override of 0 lifts the cap for "big".
				for i := 0; i < 3; i++ {
					if _, err := m.Create(as("big"), tc.cfg); err != nil {
						t.Fatalf("tenant big (no cap in the file): %v", err)
					}
				}
			}
		})
	}
}

func TestDiskQuota(t *testing.T) {
	m, _ := newPair(t, tenant.Options{Quotas: tenant.Quotas{DiskMiB: 256}})
	ctx := as("alpha")
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(ctx, info.ID); err != nil {
		t.Fatal(err) // the double's snapshot takes half its memory: 256 MiB
	}
	if _, err := m.Snapshot(ctx, info.ID); !errors.Is(err, sandbox.ErrQuota) || !strings.Contains(err.Error(), "max_disk_mib") {
		t.Fatalf("a snapshot past the disk cap: %v", err)
	}
	if err := m.Pause(ctx, info.ID); !errors.Is(err, sandbox.ErrQuota) {
		t.Fatalf("a pause past the disk cap: %v", err)
	}
	if l, _ := m.ListSnapshots(ctx); len(l) != 1 {
		t.Errorf("%d snapshots after the refusal, want 1", len(l))
	}
}

func TestEgressRulesBindTenants(t *testing.T) {
	var checked []string
	check := func(tn string, allow []string) error {
		checked = append(checked, tn)
		for _, a := range allow {
			if strings.HasPrefix(a, "10.") {
				return fmt.Errorf("%w: network.allow %s lies in a denied range", sandbox.ErrInvalid, a)
			}
		}
		return nil
	}
	m, inner := newPair(t, tenant.Options{CheckEgress: check})
	ctx := as("alpha")
	if _, err := m.Create(ctx, sandbox.Config{Network: &sandbox.NetworkPolicy{Allow: []string{"10.0.0.0/8"}}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("create with a denied range: %v", err)
	}
	if inner.Live() != 0 {
		t.Fatal("a refused create made a sandbox")
	}
	info, err := m.Create(ctx, sandbox.Config{Network: &sandbox.NetworkPolicy{Allow: []string{"8.8.8.8"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetNetwork(ctx, info.ID, sandbox.NetworkPolicy{Allow: []string{"10.1.2.3"}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("policy update to a denied range: %v", err)
	}
	got, _ := m.Get(ctx, info.ID)
	if fmt.Sprint(got.Config.Network.Allow) != "[8.8.8.8]" {
		t.Errorf("the refused update changed the policy: %v", got.Config.Network.Allow)
	}
	if fmt.Sprint(checked) != "[alpha alpha alpha]" {
		t.Errorf("egress checked for %v", checked)
	}
	// The operator is bound too (the host keeps the ranges closed for
	// every sandbox): refused here, not silently dropped there.
	if _, err := m.Create(operator, sandbox.Config{Network: &sandbox.NetworkPolicy{Allow: []string{"10.9.9.9"}}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("the operator's create with a denied range: %v", err)
	}
}

func TestEventsAreFiltered(t *testing.T) {
	m, _ := newPair(t, tenant.Options{})
	ctx, cancel := context.WithTimeout(as("beta"), 5*time.Second)
	defer cancel()
	st, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := m.Create(as("alpha"), sandbox.Config{}); err != nil {
		t.Fatal(err)
	}
	b, err := m.Create(as("beta"), sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := st.Next(ctx)
	if err != nil || ev.Sandbox != b.ID || ev.Seq != 1 {
		t.Fatalf("beta's first event: %+v %v, want its own create as seq 1", ev, err)
	}
}

func TestCapacityIsTheTenants(t *testing.T) {
	m, _ := newPair(t, tenant.Options{Quotas: tenant.Quotas{Sandboxes: 5, MemoryMiB: 2048}})
	for _, tn := range []string{"alpha", "alpha", "beta"} {
		if _, err := m.Create(as(tn), sandbox.Config{MemoryMiB: 256}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := m.Capacity(as("alpha"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Sandboxes != 2 || c.MemoryMiBUsed != 512 || c.MaxSandboxes != 5 || c.MaxMemoryMiB != 2048 {
		t.Errorf("alpha's capacity: %+v", c)
	}
	op, _ := m.Capacity(operator)
	if op.Sandboxes != 3 {
		t.Errorf("the operator's capacity: %+v", op)
	}
}

func TestParseFile(t *testing.T) {
	for _, bad := range []string{
		`{"tenants": {"Alpha": {}}}`,
		`{"tenants": {"a": {"max_sandboxs": 1}}}`,
		`{"tenants": {"a": {"max_sandboxes": -1}}}`,
		`{"tenants": {"a": {"egress_allow_private": ["10.0.0.0"]}}}`,
		`{"tenants": {}} {}`,
		`[]`,
	} {
		if _, err := tenant.ParseFile([]byte(bad)); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
	f, err := tenant.ParseFile([]byte(`{"tenants": {"alpha": {"max_sandboxes": 3, "egress_allow_private": ["10.1.2.0/24"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s := f.For("alpha")
	if q := s.Apply(tenant.Quotas{Sandboxes: 9, VCPUs: 7}); q.Sandboxes != 3 || q.VCPUs != 7 {
		t.Errorf("applied: %+v", q)
	}
	if fmt.Sprint(s.AllowPrivate()) != "[10.1.2.0/24]" {
		t.Errorf("allow private: %v", s.AllowPrivate())
	}
}

// TestChecksDoNotReadUsage: through a wrapper (metrics), a cell's
// ownership check and a create's quota check ask the manager for owners
// (sandbox.Owners), not for Get or List, whose usage costs a /proc read
// and iptables calls per sandbox.
func TestChecksDoNotReadUsage(t *testing.T) {
	inner := sandboxtest.New()
	m := tenant.New(metrics.Instrument(inner, prometheus.NewRegistry()), tenant.Options{Quotas: tenant.Quotas{Sandboxes: 5}})
	ctx := as("alpha")
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "x = 1", Timeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, sandbox.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range inner.Calls() {
		if strings.HasPrefix(c, "Get") || strings.HasPrefix(c, "List") {
			t.Errorf("a check called %s: %v", c, inner.Calls())
		}
	}
}
