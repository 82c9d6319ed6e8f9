package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// The audit log (cellvm serve --audit-log). ServeHTTP gives every request
// an AuditEntry: a record in the making that handlers fill (AuditOf) and
// that is written at most once, before the response completes:
//
//   - a plain response: when its status is sent (WriteHeader, explicit or
//     with the first byte). Handlers fill the entry before they answer,
//     as they must to answer at all.
//   - a streamed response (a cell's NDJSON events, a download): the
//     handler calls Stream at its start and Commit just before its final
//     event or byte, so a client that has the end event knows the record
//     is in the file. A streamed handler that never commits (a client gone,
//     a panic) is written when it returns, which for a chunked response is
//     still before its terminating chunk.
//
// Which requests are written: every one whose method is not GET or HEAD,
// every one answered with a status of 400 or more (refusals included) or
// cut off with an error, and GETs a handler marks with Always (downloads).
// The auth gate writes its own refusals (WithGateAudit), at a bounded
// rate: whoever reaches the port can send them. The entry fills in the
// route, the caller (tenant, token id, peer, operator), the status, the duration, the error code, and the ids
// in the path ({id} of a sandbox or snapshot route, {name} of a workspace
// or image, {path} of a file); handlers add the rest (the code's digest, a
// created sandbox's id, a file's size and digest, a policy's allow lists,
// the result's status).

// WithAudit writes the requests' audit records to l.
func WithAudit(l *audit.Log) Option {
	return func(s *server) { s.audit = newAuditSink(l, s.log) }
}

// AuditEntry is one request's audit record in the making. The methods of
// a nil *AuditEntry (a server without an audit log) do nothing, so
// handlers need not check. It is safe for concurrent use.
type AuditEntry struct {
	sink  *auditSink
	r     *http.Request
	start time.Time

	mu     sync.Mutex
	rec    audit.Record
	stream bool
	always bool
	done   bool
}

type auditKey struct{}

// AuditOf returns the entry of the request with ctx; nil when the server
// keeps no audit log.
func AuditOf(ctx context.Context) *AuditEntry {
	e, _ := ctx.Value(auditKey{}).(*AuditEntry)
	return e
}

// Set fills the record's fields: f runs under the entry's lock. Fields
// set after the record is written are lost.
func (e *AuditEntry) Set(f func(*audit.Record)) {
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	f(&e.rec)
}

// Stream says the response is streamed: the record waits for Commit (or
// the handler's return) instead of being written with the status.
func (e *AuditEntry) Stream() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.stream = true
	e.mu.Unlock()
}

// Always writes the record even for a GET that succeeds.
func (e *AuditEntry) Always() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.always = true
	e.mu.Unlock()
}

// Commit writes the record now (once; later calls and the automatic
// writes do nothing). A streamed handler calls it before its final event.
func (e *AuditEntry) Commit() {
	if e == nil {
		return
	}
	e.commit(0, "")
}

// noteError keeps a refusal's or failure's code and message.
func (e *AuditEntry) noteError(code, msg string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.rec.Error, e.rec.Reason = code, msg
	e.mu.Unlock()
}

// atHeader is the status being sent: a plain response's record is
// written now.
func (e *AuditEntry) atHeader(status int, errCode string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.rec.Status == 0 {
		e.rec.Status = status
	}
	stream := e.stream
	e.mu.Unlock()
	if !stream {
		e.commit(status, errCode)
	}
}

// commit writes the record unless it was, or the request is not one to
// audit. status and errCode fill the record's when it has none.
func (e *AuditEntry) commit(status int, errCode string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	if e.done {
		e.mu.Unlock()
		return
	}
	rec := e.rec
	if rec.Status == 0 {
		rec.Status = status
	}
	if rec.Status == 0 {
		rec.Status = http.StatusOK // nothing written yet: net/http will send 200
	}
	if rec.Error == "" {
		rec.Error = errCode
	}
	if !e.always && (e.r.Method == http.MethodGet || e.r.Method == http.MethodHead) && rec.Status < 400 && rec.Error == "" {
		// Not one to audit, so far: a GET cut off later still is.
		e.mu.Unlock()
		return
	}
	e.done = true
	e.mu.Unlock()
	e.fillFromRequest(&rec)
	e.sink.write(e.r.Context(), rec)
}

// fillFromRequest sets what the request itself says, where the handler
// set nothing.
func (e *AuditEntry) fillFromRequest(rec *audit.Record) {
	r := e.r
	rec.Time = e.start
	rec.DurationMS = float64(time.Since(e.start).Microseconds()) / 1000
	if rec.Action == "" {
		rec.Action = r.Pattern
		if rec.Action == "" {
			rec.Action = r.Method + " " + clipString(r.URL.Path, 128) // no route
		}
	}
	if c, ok := sandbox.CallerFrom(r.Context()); ok {
		rec.Tenant = cmpOr(rec.Tenant, c.Tenant)
		rec.TokenID = cmpOr(rec.TokenID, c.TokenID)
		rec.Peer = cmpOr(rec.Peer, c.Peer)
		rec.Operator = rec.Operator || c.Operator
	}
	if rec.Peer == "" {
		rec.Peer = requestPeer(r.Context(), r)
	}
	id := func(name string) string { return clipString(r.PathValue(name), 128) }
	switch {
	case strings.Contains(r.Pattern, " /v1/sandboxes/{id}"):
		rec.Sandbox = cmpOr(rec.Sandbox, id("id"))
	case strings.Contains(r.Pattern, " /v1/snapshots/{id}"):
		rec.Snapshot = cmpOr(rec.Snapshot, id("id"))
	case strings.Contains(r.Pattern, " /v1/workspaces/{name}"):
		rec.Workspace = cmpOr(rec.Workspace, id("name"))
	case strings.Contains(r.Pattern, " /v1/images/{name}"):
		rec.Image = cmpOr(rec.Image, id("name"))
	}
	if strings.Contains(r.Pattern, "/files/{path...}") && rec.Path == "" {
		rec.Path = "/" + strings.TrimPrefix(r.PathValue("path"), "/")
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// requestPeer is the client address the gate found, or the Unix socket
// peer's uid.
func requestPeer(ctx context.Context, r *http.Request) string {
	if a, ok := ClientAddr(ctx); ok {
		return a.String()
	}
	if uid, ok := PeerUID(ctx); ok {
		return fmt.Sprintf("uid:%d", uid)
	}
	return clipString(r.RemoteAddr, 64)
}

// startAudit gives r its entry; nil when the server keeps no audit log.
func (s *server) startAudit(r *http.Request, start time.Time) (*http.Request, *AuditEntry) {
	if s.audit == nil {
		return r, nil
	}
	e := &AuditEntry{sink: s.audit, start: start}
	r = r.WithContext(context.WithValue(r.Context(), auditKey{}, e))
	e.r = r
	return r, e
}

// auditSink writes records and logs its failures, at a bounded rate: a
// full disk must not turn every request into a log line.
type auditSink struct {
	l          *audit.Log
	log        *slog.Logger
	errLimit   *rate.Limiter
	suppressed atomic.Int64
}

func newAuditSink(l *audit.Log, log *slog.Logger) *auditSink {
	return &auditSink{l: l, log: log, errLimit: rate.NewLimiter(rate.Every(10*time.Second), 3)}
}

// write writes rec. A failure is logged, and the response goes on: the
// work is done, and refusing to report it would not undo it.
func (k *auditSink) write(ctx context.Context, rec audit.Record) {
	err := k.l.Write(rec)
	if err == nil {
		return
	}
	if !k.errLimit.Allow() {
		k.suppressed.Add(1)
		return
	}
	k.log.ErrorContext(ctx, "audit log: a record was not written", "action", rec.Action, "err", err,
		"suppressed", k.suppressed.Swap(0))
}

// WithGateAudit writes a record (action audit.ActionAuth) for each request
// the gate refuses, at most gateAuditRate a second after a burst; the
// number left out is in the next record's suppressed.
func WithGateAudit(l *audit.Log) GateOption {
	return func(g *tokenGate) {
		g.audit = newAuditSink(l, g.log)
		g.auditLimit = rate.NewLimiter(gateAuditRate, 100)
	}
}

const gateAuditRate = 20

// auditRefusal writes the gate's record of a refused request.
func (g *tokenGate) auditRefusal(r *http.Request, client string, status int, code string, start time.Time) {
	if g.audit == nil {
		return
	}
	if !g.auditLimit.Allow() {
		g.auditSuppressed.Add(1)
		return
	}
	g.audit.write(r.Context(), audit.Record{
		Time: start, Peer: client, Action: audit.ActionAuth, Status: status, Error: code,
		Reason:     clipString(r.Method, 16) + " " + clipString(r.URL.Path, 128),
		DurationMS: float64(time.Since(start).Microseconds()) / 1000, Suppressed: g.auditSuppressed.Swap(0),
	})
}
