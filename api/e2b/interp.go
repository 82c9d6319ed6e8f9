package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// The code interpreter (port 49999) is what @e2b/code-interpreter's
// runCode and its contexts talk to. A cellvm sandbox has a persistent
// session per language (Python, JavaScript, TypeScript, Bash) and named
// sessions besides, which are E2B's contexts: /execute is Manager.RunCell
// in the session its language or context_id picks, and /contexts lists,
// creates, removes and restarts sessions with the Manager's context
// methods (interp_contexts.go says how a context's id names a session).
//
// /execute answers NDJSON, one object per line, in the shape the SDK's
// parseOutput reads: {"type":"stdout","text":...}, {"type":"result",
// "text":...,"png":...,"is_main_result":...}, {"type":"error","name":...,
// "value":...,"traceback":"..."} and, last, {"type":"number_of_executions",
// "execution_count":N} and {"type":"end_of_execution"}.

const (
	// interpContextID is Python's default context: the sandbox's first
	// interpreter.
	interpContextID = "default"
	// interpCwd is where the interpreter starts, as E2B's images have it.
	interpCwd = "/home/user"
	// interpCellTimeout bounds a cell on the server's side. The SDK keeps
	// its own timeout (timeoutMs) and, when it passes, closes the request,
	// which interrupts the cell and keeps the interpreter's variables, as
	// a cellvm cell's timeout does.
	interpCellTimeout = 30 * time.Minute
	// interpMaxBody bounds /execute's request: the code plus its JSON.
	interpMaxBody = sandbox.MaxCodeBytes + 64<<10
)

// serveInterp answers port 49999: the code interpreter's /execute and
// /contexts.
func serveInterp(s scope, w http.ResponseWriter, r *http.Request) {
	switch p := r.URL.Path; {
	case p == "/execute":
		if r.Method != http.MethodPost {
			interpError(w, http.StatusMethodNotAllowed, "/execute takes POST")
			return
		}
		interpExecute(s, w, r)
	case p == "/contexts":
		switch r.Method {
		case http.MethodGet:
			interpListContexts(s, w, r)
		case http.MethodPost:
			interpCreateContext(s, w, r)
		default:
			interpError(w, http.StatusMethodNotAllowed, "/contexts takes GET or POST")
		}
	case strings.HasPrefix(p, "/contexts/"):
		interpContextOp(s, w, r, strings.TrimPrefix(p, "/contexts/"))
	case p == "/health":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "OK")
	default:
		interpError(w, http.StatusNotFound, "no such code interpreter route: "+clipCaller(p))
	}
}

// interpContext is a context as the SDK's Context type reads it.
type interpContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func interpDefault() interpContext {
	return interpContext{ID: interpContextID, Language: "python", Cwd: interpCwd}
}

// interpExecuteRequest is runCode's body.
type interpExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

func interpExecute(s scope, w http.ResponseWriter, r *http.Request) {
	var req interpExecuteRequest
	if err := interpDecode(r, interpMaxBody, &req); err != nil {
		interpError(w, http.StatusBadRequest, err.Error())
		return
	}
	var sess sandbox.Session
	if req.ContextID != "" {
		c, status, msg := resolveContext(s, r, req.ContextID)
		if status != 0 {
			interpError(w, status, msg)
			return
		}
		if req.Language != "" {
			if l, err := interpLanguage(req.Language); err != nil || l != c.lang {
				interpError(w, http.StatusBadRequest, fmt.Sprintf("the context %q runs %s, not %q: give the context or the language, not both", clipCaller(req.ContextID), c.lang, clipCaller(req.Language)))
				return
			}
		}
		sess = c.session()
	} else {
		l, err := interpLanguage(req.Language)
		if err != nil {
			interpError(w, http.StatusBadRequest, err.Error())
			return
		}
		if l != cell.Python {
			sess.Language = l
		}
	}
	if len(req.EnvVars) > 0 {
		interpError(w, http.StatusBadRequest, "env_vars on runCode is not supported by cellvm yet: set envs when creating the sandbox")
		return
	}
	st := &interpStream{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", "application/x-ndjson")
	// The status is written with the first event, so an error before the
	// cell started can still be an HTTP error the SDK raises as such.
	res, err := s.m.RunCell(r.Context(), s.id, sandbox.Cell{Session: sess, Code: req.Code, Timeout: interpCellTimeout}, st.event)
	if err != nil {
		if !st.started {
			status, msg := interpStatus(err)
			if status == http.StatusInternalServerError {
				s.log.Error("e2b: a cell failed before it started", "sandbox", s.id, "err", err)
			}
			interpError(w, status, msg)
			return
		}
		s.log.Warn("e2b: cell ended with an error after its start", "sandbox", s.id, "err", err)
		return
	}
	st.finish(&res)
}

// interpStream turns a cell's events into the SDK's NDJSON lines.
type interpStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	errSent bool
	ended   bool
	failed  bool // the client is gone: stop writing
}

func (st *interpStream) event(ev cell.Event) {
	switch ev.Type {
	case cell.EventStdout, cell.EventStderr:
		if ev.Text != "" {
			st.line(map[string]any{"type": string(ev.Type), "text": ev.Text, "timestamp": time.Now().UnixMicro()})
		}
	case cell.EventResult:
		if ev.Result != nil {
			st.line(interpResult(ev.Result))
		}
	case cell.EventError:
		if ev.Error != nil {
			st.line(interpErrorLine(ev.Error))
			st.errSent = true
		}
	case cell.EventEnd:
		if ev.End != nil {
			st.finish(ev.End)
		}
	}
}

// finish writes what the end adds to the stream: a note of output cut
// from the middle, the error if no error event carried it (a timeout, a
// lost interpreter), and the execution count. It writes once.
func (st *interpStream) finish(res *cell.Result) {
	if st.ended {
		return
	}
	st.ended = true
	if n := res.Truncated.StdoutBytes; n > 0 {
		st.line(map[string]any{"type": "stdout", "text": fmt.Sprintf("\n[cellvm: %d bytes of stdout cut]\n", n), "timestamp": time.Now().UnixMicro()})
	}
	if n := res.Truncated.StderrBytes; n > 0 {
		st.line(map[string]any{"type": "stderr", "text": fmt.Sprintf("\n[cellvm: %d bytes of stderr cut]\n", n), "timestamp": time.Now().UnixMicro()})
	}
	if res.Error != nil && !st.errSent {
		st.line(interpErrorLine(res.Error))
		st.errSent = true
	}
	st.line(map[string]any{"type": "number_of_executions", "execution_count": res.ExecutionCount})
	st.line(map[string]any{"type": "end_of_execution"})
}

func (st *interpStream) line(v any) {
	if st.failed {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	if !st.started {
		st.started = true
		st.w.WriteHeader(http.StatusOK)
	}
	if _, err := st.w.Write(append(b, '\n')); err != nil {
		st.failed = true
		return
	}
	_ = st.rc.Flush()
}

// interpMIME maps a Jupyter MIME type to the key the SDK's Result reads.
// Types not here keep their MIME name: the SDK puts them in extra.
var interpMIME = map[string]string{
	cell.MIMEText:            "text",
	cell.MIMEHTML:            "html",
	cell.MIMEMD:              "markdown",
	cell.MIMESVG:             "svg",
	cell.MIMEPNG:             "png",
	cell.MIMEJPEG:            "jpeg",
	"application/pdf":        "pdf",
	cell.MIMELaTeX:           "latex",
	cell.MIMEJSON:            "json",
	"application/javascript": "javascript",
}

// interpResult is one display as a "result" line. Images are base64
// already (cell.Display's convention, which is E2B's too); JSON is sent
// as the value it holds, as Jupyter's bundle has it.
func interpResult(d *cell.Display) map[string]any {
	out := map[string]any{"type": "result", "is_main_result": d.Main}
	for mime, v := range d.Data {
		key, ok := interpMIME[mime]
		if !ok {
			key = mime
		}
		if key == "json" && json.Valid([]byte(v)) {
			out[key] = json.RawMessage(v)
			continue
		}
		out[key] = v
	}
	return out
}

// interpErrorLine is an error as the SDK's ExecutionError reads it: the
// traceback one string, as Jupyter's server joins it.
func interpErrorLine(e *cell.Error) map[string]any {
	return map[string]any{"type": "error", "name": e.Name, "value": e.Value, "traceback": strings.Join(e.Traceback, "\n")}
}

// interpStatus maps a Manager error to a status the SDK's extractError
// reads (404 is NotFoundError; 502 would read as the sandbox's timeout,
// so a lost sandbox is 503).
func interpStatus(err error) (int, string) {
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound, "sandbox not found"
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, sandbox.ErrBusy):
		return http.StatusConflict, err.Error()
	case errors.Is(err, sandbox.ErrForbidden):
		return http.StatusForbidden, err.Error()
	case errors.Is(err, sandbox.ErrLost):
		return http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, sandbox.ErrNotSupported):
		return http.StatusNotImplemented, err.Error()
	case errors.Is(err, sandbox.ErrQuota):
		return http.StatusTooManyRequests, err.Error()
	case errors.Is(err, sandbox.ErrFull):
		// A paused sandbox's resume found the host's starts queue full.
		return http.StatusServiceUnavailable, err.Error()
	}
	return http.StatusInternalServerError, "internal error"
}

// interpError writes a plain-text error: the SDK reads the body as text.
func interpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	io.WriteString(w, msg)
}

func interpJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// interpDecode reads one JSON value of at most max bytes from r's body.
func interpDecode(r *http.Request, max int64, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		return fmt.Errorf("reading the request: %v", err)
	}
	if int64(len(b)) > max {
		return fmt.Errorf("request body is larger than %d bytes", max)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("request body is not the JSON expected: %v", err)
	}
	return nil
}

// clipCaller bounds a caller's string quoted back in a message.
func clipCaller(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
