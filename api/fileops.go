package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// File operations beyond upload and download: list, stat, mkdir, move,
// remove and watch. Each acts as a guest user (?user=, the cell user by
// default; root needs a sandbox created with root), so the API lists and
// changes only what that user could in a shell.

// DirResponse answers GET /v1/sandboxes/{id}/dir/{path...}.
type DirResponse struct {
	Entries []sandbox.FileEntry `json:"entries"`
}

// MakeDirResponse answers POST /v1/sandboxes/{id}/dir/{path...}.
type MakeDirResponse struct {
	Path    string `json:"path"`
	Created bool   `json:"created"`
}

// MoveRequest is the body of POST /v1/sandboxes/{id}/move.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	User string `json:"user,omitempty"`
}

// WatchStarted is the first line of a watch's NDJSON stream: later
// changes are seen. Each later line is a sandbox.FileEvent.
type WatchStarted struct {
	Watching string `json:"watching"`
}

// fileRequest reads the path, ?user=, ?depth= and ?recursive= of a file
// route, and notes the path in the audit record.
func fileRequest(r *http.Request) (sandbox.FileRequest, error) {
	q := r.URL.Query()
	req := sandbox.FileRequest{Path: r.PathValue("path"), User: q.Get("user")}
	if d := q.Get("depth"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil {
			return req, fmt.Errorf("%w: depth %q is not a number", sandbox.ErrInvalid, clipString(d, 32))
		}
		req.Depth = n
	}
	if rec := q.Get("recursive"); rec != "" {
		b, err := strconv.ParseBool(rec)
		if err != nil {
			return req, fmt.Errorf("%w: recursive %q is not true or false", sandbox.ErrInvalid, clipString(rec, 32))
		}
		req.Recursive = b
	}
	if err := req.Validate(); err != nil {
		return req, err
	}
	req.Path, _ = sandbox.GuestPath(req.Path)
	AuditOf(r.Context()).Set(func(rec *audit.Record) { rec.Path = req.Path })
	return req, nil
}

func (s *server) listDir(w http.ResponseWriter, r *http.Request) {
	req, err := fileRequest(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ents, err := s.m.ListDir(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if ents == nil {
		ents = []sandbox.FileEntry{}
	}
	s.writeJSON(w, http.StatusOK, DirResponse{Entries: ents})
}

func (s *server) statPath(w http.ResponseWriter, r *http.Request) {
	req, err := fileRequest(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	e, err := s.m.StatPath(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, e)
}

func (s *server) makeDir(w http.ResponseWriter, r *http.Request) {
	req, err := fileRequest(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	created, err := s.m.MakeDir(r.Context(), r.PathValue("id"), req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, MakeDirResponse{Path: req.Path, Created: created})
}

func (s *server) movePath(w http.ResponseWriter, r *http.Request) {
	var req MoveRequest
	if err := decodeJSON(w, r, 64<<10, &req, false); err != nil {
		s.writeError(w, err)
		return
	}
	from := sandbox.FileRequest{Path: req.From, User: req.User}
	if err := from.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	to, err := sandbox.GuestPath(req.To)
	if err != nil {
		s.writeError(w, err)
		return
	}
	from.Path, _ = sandbox.GuestPath(from.Path)
	AuditOf(r.Context()).Set(func(rec *audit.Record) { rec.Path = clipString(from.Path+" -> "+to, 8192) })
	e, err := s.m.MovePath(r.Context(), r.PathValue("id"), from, to)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.writeJSON(w, http.StatusOK, e)
}

func (s *server) removePath(w http.ResponseWriter, r *http.Request) {
	req, err := fileRequest(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if err := s.m.RemovePath(r.Context(), r.PathValue("id"), req); err != nil {
		s.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// watchDir streams the directory's changes as NDJSON until the client
// hangs up: first a WatchStarted line, then one sandbox.FileEvent a line.
// A refused watch is a plain error answer.
func (s *server) watchDir(w http.ResponseWriter, r *http.Request) {
	req, err := fileRequest(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	out := ndjsonOut{w: w, rc: http.NewResponseController(w), writeTimeout: s.streamWriteTimeout}
	var mu sync.Mutex
	ae := AuditOf(r.Context())
	err = s.m.WatchDir(ctx, r.PathValue("id"), req, func(e sandbox.FileEvent) error {
		mu.Lock()
		defer mu.Unlock()
		var v any = e
		if e == (sandbox.FileEvent{}) {
			ae.Stream()
			ae.Commit()
			v = WatchStarted{Watching: req.Path}
		}
		if !out.line(v) {
			cancel()
			return context.Canceled
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil && !out.started {
		s.writeError(w, err)
	}
}
