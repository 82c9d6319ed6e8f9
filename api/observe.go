package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// LogsResponse is the body of GET /v1/sandboxes/{id}/logs without follow.
type LogsResponse struct {
	Lines []sandbox.LogLine `json:"lines"`
}

// logs: GET /v1/sandboxes/{id}/logs?source=console|agent|vmm&tail=N
// answers with the last N lines ({"lines": [...]}); with follow=1 it
// streams them as NDJSON (one sandbox.LogLine a line), then every new line,
// until the client goes or the sandbox is deleted.
func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := sandbox.LogRequest{Source: sandbox.LogSource(q.Get("source")), Tail: sandbox.DefaultLogTail}
	if req.Source == "" {
		req.Source = sandbox.LogConsole
	}
	if t := q.Get("tail"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil {
			s.writeError(w, fmt.Errorf("%w: tail %q is not a number", sandbox.ErrInvalid, clipString(t, 32)))
			return
		}
		req.Tail = n
	}
	follow, err := boolParam(q.Get("follow"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	req.Follow = follow
	if err := req.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	id := r.PathValue("id")
	if !req.Follow {
		out := LogsResponse{Lines: []sandbox.LogLine{}}
		err := s.m.Logs(r.Context(), id, req, func(l sandbox.LogLine) error {
			out.Lines = append(out.Lines, l)
			return nil
		})
		if err != nil {
			s.writeError(w, err)
			return
		}
		s.writeJSON(w, http.StatusOK, out)
		return
	}
	// An unknown sandbox is a plain 404; then the headers go at once, so
	// the client knows the follow has begun.
	if _, err := s.m.Get(r.Context(), id); err != nil {
		s.writeError(w, err)
		return
	}
	nd := s.newNDJSON(w)
	nd.start()
	err = s.m.Logs(r.Context(), id, req, func(l sandbox.LogLine) error { return nd.send(l) })
	if err != nil && !errors.Is(err, io.ErrClosedPipe) && r.Context().Err() == nil {
		nd.send(errorBody{Error: errorFor(err)})
	}
	nd.close()
}

// events: GET /v1/events streams lifecycle events as NDJSON (one
// sandbox.Event a line) from the moment the headers arrive, until the
// client goes. A reader that falls behind gets an "error" line and the
// end of the stream.
func (s *server) events(w http.ResponseWriter, r *http.Request) {
	st, err := s.m.Events(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer st.Close()
	nd := s.newNDJSON(w)
	nd.start()
	for {
		ev, err := st.Next(r.Context())
		if err != nil {
			if errors.Is(err, sandbox.ErrEventsLagged) {
				nd.send(errorBody{Error: &Error{Code: CodeBusy, Message: err.Error()}})
			}
			nd.close()
			return
		}
		if err := nd.send(ev); err != nil {
			nd.close()
			return
		}
	}
}

// capacity: GET /v1/capacity.
func (s *server) capacity(w http.ResponseWriter, r *http.Request) {
	c, err := s.m.Capacity(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, c)
}

func boolParam(v string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("%w: %q is not a boolean (1, true, 0, false)", sandbox.ErrInvalid, clipString(v, 16))
}

// ndjson writes one JSON value a line, each flushed at once with a write
// deadline, so a client that stops reading cannot hold the handler.
type ndjson struct {
	w            http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration

	mu      sync.Mutex
	started bool
	failed  bool
	closed  bool
}

func (s *server) newNDJSON(w http.ResponseWriter) *ndjson {
	return &ndjson{w: w, rc: http.NewResponseController(w), writeTimeout: s.streamWriteTimeout}
}

// start sends the headers (once).
func (n *ndjson) start() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.startLocked()
}

func (n *ndjson) startLocked() {
	if n.started || n.closed {
		return
	}
	n.started = true
	n.w.Header().Set("Content-Type", NDJSONType)
	n.w.Header().Set("X-Content-Type-Options", "nosniff")
	n.w.WriteHeader(http.StatusOK)
	n.flush()
}

func (n *ndjson) flush() {
	if n.writeTimeout > 0 {
		_ = n.rc.SetWriteDeadline(time.Now().Add(n.writeTimeout))
	}
	if err := n.rc.Flush(); err != nil {
		n.failed = true
	}
}

// send writes v as one line; after a failed write it only returns the
// error.
func (n *ndjson) send(v any) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return io.ErrClosedPipe
	}
	n.startLocked()
	if n.failed {
		return io.ErrClosedPipe
	}
	line, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if n.writeTimeout > 0 {
		_ = n.rc.SetWriteDeadline(time.Now().Add(n.writeTimeout))
	}
	if _, err := n.w.Write(append(line, '\n')); err != nil {
		n.failed = true
		return err
	}
	n.flush()
	if n.failed {
		return io.ErrClosedPipe
	}
	return nil
}

// close stops all later writes (the handler is returning).
func (n *ndjson) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
}
