package main

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// MCP sessions belong to the token that opened them. The SDK's Streamable
// HTTP handler knows sessions by the Mcp-Session-Id header alone, so
// anyone holding an id could use a session, and its sandbox; mcpSessions
// stands in front of it and answers a session id presented by another
// token (or another tenant) exactly as the SDK answers an unknown one. It
// also caps each tenant's sessions.

// mcpSessionHeader is Streamable HTTP's session header.
const mcpSessionHeader = "Mcp-Session-Id"

// maxMCPSessionIDs bounds the table: past it, a new session is refused
// until idle ones expire.
const maxMCPSessionIDs = 65536

type mcpSessions struct {
	next http.Handler
	// idle is the SDK's session timeout: an entry unused that long is
	// gone from the SDK too, and is dropped here.
	idle time.Duration
	// perTenant caps a tenant's sessions (0: none).
	perTenant func(tenant string) int

	mu       sync.Mutex
	sessions map[string]*mcpSession
}

type mcpSession struct {
	owner    string // ownerKey of the caller that opened it
	tenant   string
	lastSeen time.Time
}

func newMCPSessions(next http.Handler, idle time.Duration, perTenant func(string) int) *mcpSessions {
	return &mcpSessions{next: next, idle: idle, perTenant: perTenant, sessions: map[string]*mcpSession{}}
}

// ownerKey names who may use a session: the token (its id) for a token's
// session, the operator's peer for a socket's.
func ownerKey(c sandbox.Caller) string {
	if c.TokenID != "" {
		return "token:" + c.TokenID
	}
	return fmt.Sprintf("operator:%s:%s", c.Peer, c.Tenant)
}

// expire drops entries idle past the SDK's timeout. Caller holds mu.
func (g *mcpSessions) expire(now time.Time) {
	for id, s := range g.sessions {
		if now.Sub(s.lastSeen) > g.idle {
			delete(g.sessions, id)
		}
	}
}

func (g *mcpSessions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := sandbox.CallerFrom(r.Context())
	key, tenant := ownerKey(c), sandbox.Owner(c.Tenant)
	now := time.Now()
	if sid := r.Header.Get(mcpSessionHeader); sid != "" {
		g.mu.Lock()
		s := g.sessions[sid]
		if s != nil && s.owner != key {
			g.mu.Unlock()
			http.Error(w, "session not found", http.StatusNotFound) // the SDK's words for an unknown id
			return
		}
		if s != nil {
			s.lastSeen = now
		}
		g.mu.Unlock()
		g.next.ServeHTTP(w, r)
		if r.Method == http.MethodDelete && s != nil {
			g.mu.Lock()
			delete(g.sessions, sid)
			g.mu.Unlock()
		}
		return
	}
	// No session id: this may open one (an initialize).
	g.mu.Lock()
	g.expire(now)
	n := 0
	for _, s := range g.sessions {
		if s.tenant == tenant {
			n++
		}
	}
	max := g.perTenant(tenant)
	full := len(g.sessions) >= maxMCPSessionIDs || max > 0 && n >= max && !(c.Operator && c.Tenant == "")
	g.mu.Unlock()
	if full && r.Method == http.MethodPost {
		w.Header().Set("Retry-After", fmt.Sprint(int(g.idle/time.Second)))
		http.Error(w, fmt.Sprintf("tenant %s has %d MCP sessions open, its cap (serve --mcp-max-sessions); end one (DELETE) or let one idle out", tenant, n), http.StatusTooManyRequests)
		return
	}
	// The session counts from its response's header on, before the
	// client can read it: a client that opened one and at once asks for
	// another must find the first counted (counting it only once the
	// handler had returned let a second session past the cap).
	rec := &sessionRecorder{ResponseWriter: w, opened: func(sid string) {
		g.mu.Lock()
		if g.sessions[sid] == nil {
			g.sessions[sid] = &mcpSession{owner: key, tenant: tenant, lastSeen: now}
		}
		g.mu.Unlock()
	}}
	g.next.ServeHTTP(rec, r)
}

// sessionRecorder hands opened the session id a response hands out, as
// its header is written.
type sessionRecorder struct {
	http.ResponseWriter
	opened      func(sid string)
	wroteHeader bool
}

func (r *sessionRecorder) note() {
	if !r.wroteHeader {
		r.wroteHeader = true
		if sid := r.Header().Get(mcpSessionHeader); sid != "" {
			r.opened(sid)
		}
	}
}

func (r *sessionRecorder) WriteHeader(code int) { r.note(); r.ResponseWriter.WriteHeader(code) }
func (r *sessionRecorder) Write(b []byte) (int, error) {
	r.note()
	return r.ResponseWriter.Write(b)
}

// FlushError notes the session before a flush sends the header (the SDK
// flushes through http.ResponseController, which finds this first).
func (r *sessionRecorder) FlushError() error {
	r.note()
	return http.NewResponseController(r.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController reach the connection (the SDK
// flushes its event stream).
func (r *sessionRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
