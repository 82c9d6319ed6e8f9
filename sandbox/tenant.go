package sandbox

import "context"

// TEMPORARY minimal copy of the lead's caller identity (issue 23), so the
// cell policy hook can read the tenant before the tenancy core is merged.
// The lead's sandbox/tenant.go replaces this file whole.

// Caller is who makes a request, as the front end that authenticated it
// says. It travels in the request's context (WithCaller).
type Caller struct {
	Tenant   string // the tenant the request acts for ("default" for a bare token)
	Operator bool   // a Unix-socket peer: sees every tenant
	TokenID  string // a short digest of the bearer token, never the token ("" on the socket)
	Peer     string // the client's address, or "uid:N" on the socket
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
