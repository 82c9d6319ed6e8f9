package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/cellvm/cellvm/sandbox"
)

// Who calls. The TCP listener's token gate (RequireToken) puts the
// token's tenant in the request's context; a peer of the Unix socket is
// the operator, who sees every tenant's objects and may act for one tenant
// by naming it (?tenant=NAME or the X-Cellvm-Tenant header). The manager
// the server calls (package sandbox/tenant, in the daemon) enforces what
// each caller may see.

// TenantHeader names the tenant an operator acts for.
const TenantHeader = "X-Cellvm-Tenant"

// WithTenants says which tenants exist, for an operator naming one: a
// name known reports false for is refused (400), since acting for a
// misspelt tenant would make objects nobody can see. Without it any
// valid name is accepted.
func WithTenants(known func(string) bool) Option {
	return func(s *server) { s.knownTenant = known }
}

// withCaller returns r with its caller in the context, or an error to
// answer with. A request that came neither through the token gate nor the
// Unix socket (a handler mounted elsewhere, a test) keeps its context as
// it is: the manager decides what no caller means.
func (s *server) withCaller(r *http.Request) (*http.Request, error) {
	named := r.URL.Query().Get("tenant")
	if h := r.Header.Get(TenantHeader); h != "" {
		if named != "" && named != h {
			return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalid,
				Message: "?tenant= and the " + TenantHeader + " header name different tenants"}
		}
		named = h
	}
	ctx := r.Context()
	c, fromGate := sandbox.CallerFrom(ctx)
	if uid, ok := PeerUID(ctx); ok && !fromGate {
		c = sandbox.Caller{Operator: true, Peer: "uid:" + strconv.Itoa(uid)}
	} else if !fromGate {
		if named != "" {
			return nil, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "only the operator (a peer of the daemon's Unix socket) can act for a tenant"}
		}
		return r, nil
	}
	if named != "" {
		if !c.Operator {
			return nil, &Error{Status: http.StatusForbidden, Code: CodeForbidden,
				Message: "only the operator (a peer of the daemon's Unix socket) can act for a tenant; a token acts for its own"}
		}
		if err := sandbox.CheckTenantName(named); err != nil {
			return nil, err
		}
		if s.knownTenant != nil && !s.knownTenant(named) {
			return nil, &Error{Status: http.StatusBadRequest, Code: CodeInvalid,
				Message: fmt.Sprintf("unknown tenant %q: no token in the token file and no entry in the tenant config names it", named)}
		}
		c.Tenant = named
	}
	return r.WithContext(sandbox.WithCaller(ctx, c)), nil
}
