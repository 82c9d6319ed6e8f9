package api

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// NDJSONType is the media type of a streamed cell: one cell.Event per line.
const NDJSONType = "application/x-ndjson"

// CellRequest is the body of POST /v1/sandboxes/{id}/cells.
type CellRequest struct {
	Code string `json:"code"`
	// TimeoutMS nil means the server's default.
	TimeoutMS *int64 `json:"timeout_ms,omitempty"`
	// Language is the cell's language (cell.ParseLanguage: "" is Python);
	// Context names its session ("" the language's default one).
	Language string `json:"language,omitempty"`
	Context  string `json:"context,omitempty"`
}

// runCell runs a cell and answers with one cell.Result, or, when the
// client asks for NDJSON (Accept: application/x-ndjson, or ?stream=1),
// with cell.Event lines flushed as they happen and ending with "end".
//
// The streamed response's headers are sent with the first event, so a
// refusal before the cell starts (unknown sandbox, busy) is still an
// ordinary JSON error with its status. The request's context is the
// cell's: a client that disconnects interrupts its cell.
func (s *server) runCell(w http.ResponseWriter, r *http.Request) {
	var req CellRequest
	if err := decodeJSON(w, r, maxCodeBodyBytes, &req, false); err != nil {
		s.writeError(w, err)
		return
	}
	if len(req.Code) > sandbox.MaxCodeBytes {
		s.writeError(w, fmt.Errorf("%w: code is %d bytes, at most %d", sandbox.ErrTooLarge, len(req.Code), sandbox.MaxCodeBytes))
		return
	}
	timeout, err := s.timeoutFrom(req.TimeoutMS)
	if err != nil {
		s.writeError(w, err)
		return
	}
	// An unknown language or a bad context name is 400 naming what is
	// allowed; the manager refuses a language the sandbox's image lacks.
	sess, err := sandbox.Session{Language: cell.Language(req.Language), Context: req.Context}.Normalize()
	if err != nil {
		s.writeError(w, err)
		return
	}
	spec := sandbox.Cell{Session: sess, Code: req.Code, Timeout: timeout}
	id := r.PathValue("id")
	ae := AuditOf(r.Context())
	ae.Set(func(rec *audit.Record) { rec.SetCode(req.Code) })
	if !wantsStream(r) {
		res, err := s.m.RunCell(r.Context(), id, spec, nil)
		if err != nil {
			s.writeError(w, err)
			return
		}
		auditResult(ae, res)
		s.writeJSON(w, http.StatusOK, res)
		return
	}
	// The record is written before the end event, once the result is
	// known.
	ae.Stream()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st := &eventStream{out: ndjsonOut{w: w, rc: http.NewResponseController(w), writeTimeout: s.streamWriteTimeout}, cancel: cancel}
	res, err := s.m.RunCell(ctx, id, spec, st.fromManager)
	st.mu.Lock()
	started, ended, held := st.out.started, st.ended, st.heldEnd
	st.mu.Unlock()
	switch {
	case err != nil && !started:
		s.writeError(w, err)
	case err != nil:
		// The manager broke its contract (errors only before a cell
		// starts). Give the client its end event anyway.
		s.log.Error("cell failed after it started streaming", "sandbox", id, "err", err)
		st.send(cell.Event{Type: cell.EventEnd, End: &cell.Result{
			Status: cell.StatusLost,
			Error:  &cell.Error{Name: "SandboxError", Value: err.Error()},
		}})
	case held != nil:
		if held.End != nil {
			auditResult(ae, *held.End)
		}
		ae.Commit()
		st.send(*held)
	case !ended:
		// The manager returned without sending its end event.
		auditResult(ae, res)
		ae.Commit()
		st.send(cell.Event{Type: cell.EventEnd, End: &res})
	}
	st.close()
}

// auditResult puts a cell's outcome in its audit record.
func auditResult(ae *AuditEntry, res cell.Result) {
	ae.Set(func(rec *audit.Record) {
		rec.ResultStatus, rec.KilledBy = string(res.Status), string(res.KilledBy)
		if res.Error != nil && rec.Reason == "" {
			rec.Reason = res.Error.Name
		}
	})
}

// wantsStream reports whether the client asked for NDJSON.
func wantsStream(r *http.Request) bool {
	switch r.URL.Query().Get("stream") {
	case "1", "true":
		return true
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == NDJSONType {
			return true
		}
	}
	return false
}

// eventStream writes cell events as NDJSON lines, each flushed at once.
// After a failed write it drops further events and cancels the cell. The
// mutex guards against a manager that calls onEvent after RunCell returned
// or from two goroutines: the response writer must not be used then.
type eventStream struct {
	mu     sync.Mutex
	out    ndjsonOut
	cancel context.CancelFunc
	ended  bool
	failed bool
	closed bool
	// heldEnd is the manager's end event, sent only once RunCell has
	// returned: a client that has the end event may start its next cell
	// at once, and the manager takes one only after RunCell returns.
	heldEnd *cell.Event
}

// fromManager is the manager's onEvent: events go out as they come, the
// end event is held for runCell to send.
func (st *eventStream) fromManager(ev cell.Event) {
	if ev.Type != cell.EventEnd {
		st.send(ev)
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.heldEnd == nil && !st.closed {
		st.heldEnd = &ev
	}
}

func (st *eventStream) close() {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
}

func (st *eventStream) send(ev cell.Event) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.failed || st.ended || st.closed {
		return
	}
	if !st.out.line(ev) {
		st.fail()
		return
	}
	if ev.Type == cell.EventEnd {
		st.ended = true
	}
}

func (st *eventStream) fail() {
	st.failed = true
	st.cancel()
}
