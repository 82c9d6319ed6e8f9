package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// Processes: the routes of sandbox.Manager's process methods.
//
//	POST /v1/sandboxes/{id}/processes              start (NDJSON stream, or the pid)
//	GET  /v1/sandboxes/{id}/processes              list
//	GET  /v1/sandboxes/{id}/processes/{pid}/attach stream a running one (NDJSON)
//	POST /v1/sandboxes/{id}/processes/{pid}/stdin  input
//	POST /v1/sandboxes/{id}/processes/{pid}/signal signal
//	POST /v1/sandboxes/{id}/processes/{pid}/resize terminal size
//
// A stream is sandbox.ProcessEvent lines ("start", "stdout", "stderr",
// "pty" with base64 data, then "end" with the exit), each flushed. A
// client that hangs up a stream leaves the process running: it goes
// only when it exits, is signalled or its timeout passes. Without
// streaming, a start answers as soon as the process runs, with its pid.

// ProcessStartRequest is the body of POST /v1/sandboxes/{id}/processes.
type ProcessStartRequest struct {
	Argv  []string          `json:"argv"`
	Cwd   string            `json:"cwd,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	User  string            `json:"user,omitempty"`
	PTY   *sandbox.PTYSize  `json:"pty,omitempty"`
	Stdin bool              `json:"stdin,omitempty"`
	Tag   string            `json:"tag,omitempty"`
	// TimeoutMS ends the process that long after its start; 0 or none:
	// it runs until it exits or is signalled.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// ProcessStarted answers a start that does not stream: the pid of the
// running process, or the exit of one that could not start.
type ProcessStarted struct {
	PID  int                  `json:"pid,omitempty"`
	Exit *sandbox.ProcessExit `json:"exit,omitempty"`
}

// ProcessInput is the body of .../stdin: Data as text, or DataBase64 for
// bytes that are not UTF-8 (one of the two); EOF closes stdin after it.
type ProcessInput struct {
	Data       string `json:"data,omitempty"`
	DataBase64 string `json:"data_base64,omitempty"`
	EOF        bool   `json:"eof,omitempty"`
}

// ProcessSignal is the body of .../signal.
type ProcessSignal struct {
	Signal string `json:"signal"`
}

// maxProcessBody bounds a process request's body: an input of
// MaxProcessInput bytes in base64, or an argv and env.
const maxProcessBody = 2*sandbox.MaxProcessInput + 64<<10

func (s *server) startProcess(w http.ResponseWriter, r *http.Request) {
	var req ProcessStartRequest
	if err := decodeJSON(w, r, maxCodeBodyBytes, &req, false); err != nil {
		s.writeError(w, err)
		return
	}
	if req.TimeoutMS < 0 || req.TimeoutMS > sandbox.MaxTTL.Milliseconds() {
		s.writeError(w, fmt.Errorf("%w: timeout_ms %d out of 0..%d", sandbox.ErrInvalid, req.TimeoutMS, sandbox.MaxTTL.Milliseconds()))
		return
	}
	pr := sandbox.ProcessRequest{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, User: req.User, PTY: req.PTY,
		Stdin: req.Stdin, Tag: req.Tag, Timeout: time.Duration(req.TimeoutMS) * time.Millisecond}
	if err := pr.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	id := r.PathValue("id")
	ae := AuditOf(r.Context())
	ae.Set(func(rec *audit.Record) { rec.SetArgv(req.Argv) })
	if !wantsStream(r) {
		s.startBackground(w, r, id, pr)
		return
	}
	st := s.newProcStream(w, r)
	defer st.cancel()
	exit, err := s.m.StartProcess(st.ctx, id, pr, st.send)
	st.finish(s, exit, err)
}

// startBackground starts the process and answers with its pid once it
// runs, leaving it to run.
func (s *server) startBackground(w http.ResponseWriter, r *http.Request, id string, pr sandbox.ProcessRequest) {
	// The process outlives this request: the stream to it ends at the
	// start event, by the callback's error, not by the request's end.
	errStarted := errors.New("started")
	pid := 0
	exit, err := s.m.StartProcess(r.Context(), id, pr, func(e sandbox.ProcessEvent) error {
		if e.Kind == sandbox.ProcessStart {
			pid = e.PID
			return errStarted
		}
		return nil
	})
	switch {
	case pid > 0:
		s.writeJSON(w, http.StatusOK, ProcessStarted{PID: pid})
	case err != nil:
		s.writeError(w, err)
	default:
		s.writeJSON(w, http.StatusOK, ProcessStarted{Exit: &exit})
	}
}

func (s *server) listProcesses(w http.ResponseWriter, r *http.Request) {
	list, err := s.m.ListProcesses(r.Context(), r.PathValue("id"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	if list == nil {
		list = []sandbox.ProcessInfo{}
	}
	s.writeJSON(w, http.StatusOK, list)
}

func (s *server) attachProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	st := s.newProcStream(w, r)
	defer st.cancel()
	exit, err := s.m.AttachProcess(st.ctx, r.PathValue("id"), pid, st.send)
	st.finish(s, exit, err)
}

func (s *server) processStdin(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var in ProcessInput
	if err := decodeJSON(w, r, maxProcessBody, &in, false); err != nil {
		s.writeError(w, err)
		return
	}
	data := []byte(in.Data)
	if in.DataBase64 != "" {
		if in.Data != "" {
			s.writeError(w, fmt.Errorf("%w: set data or data_base64, not both", sandbox.ErrInvalid))
			return
		}
		if data, err = base64.StdEncoding.DecodeString(in.DataBase64); err != nil {
			s.writeError(w, fmt.Errorf("%w: data_base64: %v", sandbox.ErrInvalid, err))
			return
		}
	}
	if len(data) > sandbox.MaxProcessInput {
		s.writeError(w, fmt.Errorf("%w: input is %d bytes, at most %d", sandbox.ErrTooLarge, len(data), sandbox.MaxProcessInput))
		return
	}
	if err := s.m.SendInput(r.Context(), r.PathValue("id"), pid, data, in.EOF); err != nil {
		s.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) signalProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var sig ProcessSignal
	if err := decodeJSON(w, r, 4<<10, &sig, false); err != nil {
		s.writeError(w, err)
		return
	}
	if !sandbox.ValidSignal(sig.Signal) {
		s.writeError(w, fmt.Errorf("%w: signal %q: use SIGTERM, SIGKILL, SIGINT or SIGHUP", sandbox.ErrInvalid, clipText(sig.Signal, 32)))
		return
	}
	if err := s.m.SignalProcess(r.Context(), r.PathValue("id"), pid, sig.Signal); err != nil {
		s.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) resizeProcess(w http.ResponseWriter, r *http.Request) {
	pid, err := pidOf(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	var size sandbox.PTYSize
	if err := decodeJSON(w, r, 4<<10, &size, false); err != nil {
		s.writeError(w, err)
		return
	}
	if err := size.Validate(); err != nil {
		s.writeError(w, err)
		return
	}
	if err := s.m.ResizePTY(r.Context(), r.PathValue("id"), pid, size); err != nil {
		s.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func pidOf(r *http.Request) (int, error) {
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil || pid < 1 || pid > 1<<22 {
		return 0, fmt.Errorf("%w: pid %q is not a process id", sandbox.ErrInvalid, clipText(r.PathValue("pid"), 32))
	}
	return pid, nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// procStream writes a process's events as NDJSON. A failed write ends
// the stream (its context), not the process.
type procStream struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	out    ndjsonOut
	ended  bool
	failed bool
}

func (s *server) newProcStream(w http.ResponseWriter, r *http.Request) *procStream {
	ctx, cancel := context.WithCancel(r.Context())
	return &procStream{ctx: ctx, cancel: cancel,
		out: ndjsonOut{w: w, rc: http.NewResponseController(w), writeTimeout: s.streamWriteTimeout}}
}

func (st *procStream) send(e sandbox.ProcessEvent) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.failed || st.ended {
		return context.Canceled
	}
	if !st.out.line(e) {
		st.failed = true
		st.cancel()
		return context.Canceled
	}
	st.ended = e.Kind == sandbox.ProcessEnd
	return nil
}

// finish ends the response: an error before the stream started is an
// ordinary JSON error; after it, an end event saying what went wrong.
func (st *procStream) finish(s *server, exit sandbox.ProcessExit, err error) {
	st.mu.Lock()
	started, ended, failed := st.out.started, st.ended, st.failed
	st.mu.Unlock()
	switch {
	case failed || ended:
	case err != nil && !started:
		s.writeError(st.out.w, err)
	case err != nil:
		if st.ctx.Err() == nil {
			st.send(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &sandbox.ProcessExit{ExitCode: -1, Error: err.Error()}})
		}
	default:
		st.send(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &exit})
	}
	st.mu.Lock()
	st.ended = true // nothing more goes out once the handler returns
	st.mu.Unlock()
}
