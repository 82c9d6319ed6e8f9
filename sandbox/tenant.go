package sandbox

import (
	"context"
	"fmt"
	"strings"
)

// Tenants, as the contract names them. A tenant is whoever holds a token:
// every sandbox, snapshot and workspace has one owner tenant (Config.Tenant,
// SnapshotInfo.Tenant, WorkspaceInfo.Tenant), and a front end serving
// tenants (package sandbox/tenant) lets each see and act on its own only.
// The engine records owners; it does not enforce them, because an engine
// embedded in one program has one user.

// DefaultTenant owns what a bare token makes, and what was made before
// tenants existed (an empty Tenant field reads as DefaultTenant).
const DefaultTenant = "default"

// MaxTenantName bounds a tenant's name.
const MaxTenantName = 64

// ValidTenantName reports whether name can name a tenant: 1 to
// MaxTenantName of a-z, 0-9, '-', '_' and '.', starting with a letter or a
// digit. It appears in file names and audit records, so the alphabet is
// small.
func ValidTenantName(name string) bool { return ValidWorkspaceName(name) }

// CheckTenantName is ValidTenantName as an error that names the rule.
func CheckTenantName(name string) error {
	if !ValidTenantName(name) {
		return fmt.Errorf("%w: tenant %q: want 1 to %d of a-z, 0-9, '-', '_' and '.', starting with a letter or digit", ErrInvalid, clip(name, 80), MaxTenantName)
	}
	return nil
}

// Owner returns tenant, or DefaultTenant when it is empty.
func Owner(tenant string) string {
	if tenant == "" {
		return DefaultTenant
	}
	return tenant
}

// Caller is who makes a request, as the front end that authenticated it
// says. It travels in the request's context (WithCaller).
type Caller struct {
	// Tenant is the tenant the request acts for: the token's tenant, or
	// the one an operator names. Empty only for an operator acting for
	// no tenant in particular (it sees every tenant's objects, and what
	// it makes belongs to DefaultTenant).
	Tenant string
	// Operator is a peer of the daemon's Unix socket: it sees and acts on
	// every tenant's objects.
	Operator bool
	// TokenID is a short digest of the bearer token, never the token; ""
	// on the Unix socket.
	TokenID string
	// Peer is the client's address, or "uid:N" on the Unix socket.
	Peer string
}

// Sees reports whether c may see an object owned by owner: an operator
// acting for no tenant sees all, anyone else only its tenant's.
func (c Caller) Sees(owner string) bool {
	if c.Operator && c.Tenant == "" {
		return true
	}
	return Owner(c.Tenant) == Owner(owner)
}

// String names the caller for logs: "tenant alpha (token 1a2b3c4d)".
func (c Caller) String() string {
	var b strings.Builder
	switch {
	case c.Operator && c.Tenant == "":
		b.WriteString("the operator")
	case c.Operator:
		fmt.Fprintf(&b, "the operator for tenant %s", c.Tenant)
	default:
		fmt.Fprintf(&b, "tenant %s", Owner(c.Tenant))
	}
	if c.TokenID != "" {
		fmt.Fprintf(&b, " (token %s)", c.TokenID)
	}
	return b.String()
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, if any.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Summary is a sandbox's owner and machine: what a front end serving
// tenants checks on every request, without the usage Info reads.
type Summary struct {
	ID        string
	Tenant    string
	VCPUs     int
	MemoryMiB int
}

// Owners is implemented by a Manager that can tell a sandbox's owner and
// machine cheaply. Info carries usage (a /proc read, and iptables calls
// for the egress counters) that an ownership check made on every request,
// or a quota check made on every create, must not pay for each sandbox.
type Owners interface {
	// Owner is Get's answer reduced to a Summary (ErrNotFound alike).
	Owner(ctx context.Context, id string) (Summary, error)
	// Summaries is List's answer reduced to Summaries.
	Summaries(ctx context.Context) ([]Summary, error)
}

// Wrapper is implemented by a Manager that wraps another (metrics, the
// cell policy hook): Unwrap returns the one it wraps.
type Wrapper interface {
	Unwrap() Manager
}

// OwnersOf returns the first Owners found by unwrapping m, or nil.
func OwnersOf(m Manager) Owners {
	for i := 0; m != nil && i < 16; i++ {
		if o, ok := m.(Owners); ok {
			return o
		}
		w, ok := m.(Wrapper)
		if !ok {
			return nil
		}
		m = w.Unwrap()
	}
	return nil
}
