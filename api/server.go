package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellvm/cellvm/sandbox"
)

// Defaults for the server's limits; each can be changed with an Option.
const (
	// DefaultMaxJSONBytes bounds small JSON bodies (create, network).
	DefaultMaxJSONBytes = 1 << 20
	// DefaultMaxUploadBytes bounds one file upload.
	DefaultMaxUploadBytes = 1 << 30
	// DefaultCellTimeout is used when a cell or exec request has no
	// timeout_ms; DefaultMaxTimeout is the most a request may ask for.
	DefaultCellTimeout = 60 * time.Second
	DefaultMaxTimeout  = 30 * time.Minute
	// DefaultStreamWriteTimeout bounds one write of a streamed event, so a
	// client that stops reading cannot hold a cell open forever.
	DefaultStreamWriteTimeout = 30 * time.Second
)

// maxCodeBodyBytes bounds the body of a cells or exec request: the code or
// stdin (1 MiB each once decoded) can grow up to six times when escaped as
// JSON ("\u0001"), so the body limit is looser and the decoded sizes are
// checked on their own.
const maxCodeBodyBytes = 6*sandbox.MaxCodeBytes + 64<<10

// Option changes a server limit.
type Option func(*server)

// WithMaxUploadBytes sets the largest file upload accepted (413 beyond).
func WithMaxUploadBytes(n int64) Option { return func(s *server) { s.maxUpload = n } }

// WithMaxJSONBytes sets the largest small JSON body accepted (413 beyond).
func WithMaxJSONBytes(n int64) Option { return func(s *server) { s.maxJSON = n } }

// WithTimeouts sets the default and the largest timeout for cells and exec.
func WithTimeouts(def, limit time.Duration) Option {
	return func(s *server) { s.defTimeout, s.maxTimeout = def, limit }
}

// WithStreamWriteTimeout bounds each write of a streamed cell event.
func WithStreamWriteTimeout(d time.Duration) Option {
	return func(s *server) { s.streamWriteTimeout = d }
}

// WithMCP serves MCP's Streamable HTTP at /mcp with h (cellvm serve --mcp
// gives agent/mcpserver's handler). Without it /mcp answers 404: the route
// is in the table either way, and its implementation stays outside this
// package.
func WithMCP(h http.Handler) Option { return func(s *server) { s.mcp = h } }

type server struct {
	m                  sandbox.Manager
	log                *slog.Logger
	mux                *http.ServeMux
	maxJSON            int64
	maxUpload          int64
	maxImageUpload     int64
	defTimeout         time.Duration
	maxTimeout         time.Duration
	streamWriteTimeout time.Duration
	mcp                http.Handler      // nil: MCP is not served
	knownTenant        func(string) bool // nil: any valid tenant name
	audit              *auditSink        // nil: no audit records (audit.go)
	version            *VersionInfo      // nil: the build info's (version.go)

	registry    *prometheus.Registry
	reqMetrics  *requestMetrics
	promHandler http.Handler
}

// NewServer returns the API handler over m. log receives one record per
// request; nil discards them.
func NewServer(m sandbox.Manager, log *slog.Logger, opts ...Option) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &server{
		m:                  m,
		log:                log,
		mux:                http.NewServeMux(),
		maxJSON:            DefaultMaxJSONBytes,
		maxUpload:          DefaultMaxUploadBytes,
		maxImageUpload:     DefaultMaxImageUploadBytes,
		defTimeout:         DefaultCellTimeout,
		maxTimeout:         DefaultMaxTimeout,
		streamWriteTimeout: DefaultStreamWriteTimeout,
	}
	for _, o := range opts {
		o(s)
	}
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	s.reqMetrics = newRequestMetrics(s.registry)
	s.promHandler = s.metricsHandler()
	for _, rt := range routes() {
		h := rt.handler
		s.mux.HandleFunc(rt.method+" "+rt.pattern, func(w http.ResponseWriter, r *http.Request) { h(s, w, r) })
	}
	return s
}

// ServeHTTP logs the request, refuses non-canonical paths and turns the
// mux's plain-text 404 and 405 into JSON errors.
func (s *server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	r, err := s.withCaller(req)
	if err != nil {
		r = req
	}
	r, rec.audit = s.startAudit(r, start)
	// Deferred so that a handler aborting a half-sent response
	// (panic(http.ErrAbortHandler)) is logged too.
	defer s.logRequest(r, rec, start)
	defer func() { rec.audit.commit(rec.status, rec.errCode) }()
	if err != nil {
		s.writeError(rec, err)
		return
	}
	s.serve(rec, r)
}

func (s *server) logRequest(r *http.Request, rec *statusRecorder, start time.Time) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("path", clipString(r.URL.Path, 256)),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.Int64("bytes_out", rec.written),
	}
	if id := r.PathValue("id"); id != "" {
		attrs = append(attrs, slog.String("sandbox", clipString(id, 128)))
	}
	if uid, ok := PeerUID(r.Context()); ok {
		attrs = append(attrs, slog.Int("peer_uid", uid))
	}
	if rec.errCode != "" {
		attrs = append(attrs, slog.String("error", rec.errCode))
	}
	if rec.errMsg != "" {
		attrs = append(attrs, slog.String("detail", clipString(rec.errMsg, 4096)))
	}
	s.reqMetrics.observe(r, status, time.Since(start))
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelError
	}
	s.log.LogAttrs(r.Context(), level, "api request", attrs...)
}

func (s *server) serve(w *statusRecorder, r *http.Request) {
	// ServeMux would answer an unclean path ("a/../b", or "%2e%2e" once
	// decoded) with a redirect, which clients may follow by turning a PUT
	// into a GET. Refuse it instead.
	if p := r.URL.Path; p == "" || cleanURLPath(p) != p {
		s.writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalid,
			Message: fmt.Sprintf("path %q is not in canonical form (no \"..\", \".\" or \"//\")", clipString(p, 128))})
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern != "" {
		s.mux.ServeHTTP(w, r)
		return
	}
	// No route: let the mux decide between 404 and 405, then answer in JSON.
	probe := &headerProbe{header: http.Header{}}
	h.ServeHTTP(probe, r)
	if allow := probe.header.Get("Allow"); allow != "" {
		w.Header().Set("Allow", allow)
	}
	if probe.status == http.StatusMethodNotAllowed {
		s.writeError(w, &Error{Status: http.StatusMethodNotAllowed, Code: CodeInvalid,
			Message: fmt.Sprintf("method %s not allowed on %s", r.Method, clipString(r.URL.Path, 128))})
		return
	}
	s.writeError(w, &Error{Status: http.StatusNotFound, Code: CodeNotFound,
		Message: fmt.Sprintf("no route for %s %s", r.Method, clipString(r.URL.Path, 128))})
}

// cleanURLPath is path.Clean that keeps a trailing slash.
func cleanURLPath(p string) string {
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// headerProbe is a ResponseWriter that records only the status and headers.
type headerProbe struct {
	header http.Header
	status int
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) Write(b []byte) (int, error) { return len(b), nil }
func (p *headerProbe) WriteHeader(code int)        { p.status = code }

// statusRecorder notes the status and size of a response for the log.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	written int64
	errCode string
	errMsg  string // kept for the log when the error is the server's own (5xx)
	audit   *AuditEntry
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
		r.audit.atHeader(code, r.errCode)
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
		r.audit.atHeader(http.StatusOK, "")
	}
	n, err := r.ResponseWriter.Write(b)
	r.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (Flush,
// SetWriteDeadline).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// writeJSON sends v with status. Cell results go out through their own
// encoder, straight to w (preEncoded, ndjsonout.go).
func (s *server) writeJSON(w http.ResponseWriter, status int, v any) {
	if j, ok := preEncoded(v); ok {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(j.Len()+1))
		w.WriteHeader(status)
		if _, err := j.WriteTo(w); err == nil {
			_, _ = w.Write([]byte{'\n'})
		}
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		s.writeError(w, fmt.Errorf("encoding response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError sends err as a JSON error; err may be an *Error or anything
// errorFor maps.
func (s *server) writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = errorFor(err)
	}
	if rec, ok := w.(*statusRecorder); ok {
		rec.errCode = e.Code
		rec.audit.noteError(e.Code, e.Message)
		if e.Status >= 500 {
			rec.errMsg = e.Message
		}
	}
	switch d, ok := sandbox.RetryAfter(err); {
	case ok:
		w.Header().Set("Retry-After", fmt.Sprint(max(1, int((d+time.Second-1)/time.Second))))
	case e.Code == CodeFull, e.Code == CodeQuota:
		w.Header().Set("Retry-After", "5")
	}
	b, _ := json.Marshal(errorBody{Error: e})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)+1))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append(b, '\n'))
}

// decodeJSON reads one JSON value of at most limit bytes into v, rejecting
// unknown fields and trailing data. An empty body decodes as {} when
// emptyOK.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any, emptyOK bool) error {
	if r.ContentLength > limit {
		return fmt.Errorf("%w: request body is %d bytes, at most %d", sandbox.ErrTooLarge, r.ContentLength, limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body larger than %d bytes", sandbox.ErrTooLarge, limit)
		}
		return fmt.Errorf("%w: reading request body: %v", sandbox.ErrInvalid, err)
	}
	if len(bytes.TrimSpace(body)) == 0 && emptyOK {
		return nil
	}
	return decodeStrict(body, v)
}

// decodeStrict decodes one JSON value, rejecting unknown fields, trailing
// data and an empty body.
func decodeStrict(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%w: request body is empty, a JSON object is required", sandbox.ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: bad JSON body: %v", sandbox.ErrInvalid, err)
	}
	if err := dec.Decode(&json.RawMessage{}); err != io.EOF {
		return fmt.Errorf("%w: bad JSON body: data after the JSON value", sandbox.ErrInvalid)
	}
	return nil
}

// timeoutFrom turns an optional timeout_ms into a duration: missing means
// the default; present must be in 1..max.
func (s *server) timeoutFrom(ms *int64) (time.Duration, error) {
	if ms == nil {
		return s.defTimeout, nil
	}
	maxMS := s.maxTimeout.Milliseconds()
	if *ms <= 0 || *ms > maxMS {
		return 0, fmt.Errorf("%w: timeout_ms %d out of range 1..%d (omit it for the default %d)",
			sandbox.ErrInvalid, *ms, maxMS, s.defTimeout.Milliseconds())
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
