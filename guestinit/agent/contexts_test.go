package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/interp"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/guestinit/sessions"
)

// fakeSession is a language session whose "code" is "name=value" (sets)
// or "name" (its value, or a NameError).
type fakeSession struct {
	id   string
	mu   sync.Mutex
	vars map[string]string
	up   bool
}

func newFakeSession(id string) *fakeSession { return &fakeSession{id: id, vars: map[string]string{}} }

func (f *fakeSession) RunLanguage(_ context.Context, lang cell.Language, code string, _ time.Duration, _ func(cell.Event)) (cell.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.up = true
	res := cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: f.id + " " + string(lang)}
	if k, v, ok := strings.Cut(code, "="); ok {
		f.vars[k] = v
	} else if v, ok := f.vars[code]; ok {
		res.Results = []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: v}}}
	} else {
		res.Status, res.Error = cell.StatusError, &cell.Error{Name: "NameError", Value: code}
	}
	return res, nil
}
func (f *fakeSession) Interrupt() bool { return false }
func (f *fakeSession) Restart() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.vars)
	f.up = true
	return nil
}
func (f *fakeSession) SetEnv(map[string]string) error { return nil }
func (f *fakeSession) Reseed() (bool, error)          { return false, nil }
func (f *fakeSession) Running() bool                  { f.mu.Lock(); defer f.mu.Unlock(); return f.up }
func (f *fakeSession) Close() error                   { return nil }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeRegistry is a sessions.Registry over fake sessions.
func fakeRegistry(t *testing.T) *sessions.Registry {
	t.Helper()
	r, err := sessions.New(sessions.Config{Primary: newFakeSession("python/default"), Logger: quietLog(),
		New: func(c interp.Config) (sessions.Session, error) { return newFakeSession(c.Runtime), nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// wire is a host's end of one agent connection.
type wire struct {
	t *testing.T
	c *proto.Conn
}

func dialAgent(t *testing.T, in Interpreter) *wire {
	t.Helper()
	host, guest := net.Pipe()
	srv := NewServer(Config{Interp: in, Logger: quietLog()})
	done := make(chan struct{})
	go func() { srv.ServeConn(guest); close(done) }()
	t.Cleanup(func() { host.Close(); <-done })
	w := &wire{t: t, c: proto.NewConn(host, proto.MaxAgentMessage)}
	if err := w.c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version}); err != nil {
		t.Fatal(err)
	}
	var h proto.Hello
	if err := w.c.ReadJSON(proto.TypeHello, &h); err != nil {
		t.Fatal(err)
	}
	return w
}

// do sends req and returns its response, skipping a cell's events.
func (w *wire) do(req proto.Request) proto.Response {
	w.t.Helper()
	if err := w.c.WriteJSON(proto.TypeRequest, req); err != nil {
		w.t.Fatal(err)
	}
	for {
		m, err := w.c.ReadMessage()
		if err != nil {
			w.t.Fatalf("%s: %v", req.Op, err)
		}
		if m.Type != proto.TypeResponse {
			continue
		}
		var r proto.Response
		if err := json.Unmarshal(m.Payload, &r); err != nil {
			w.t.Fatal(err)
		}
		return r
	}
}

func (w *wire) run(lang, ctxName, code string) *cell.Result {
	w.t.Helper()
	r := w.do(proto.Request{Op: proto.OpRun, Language: lang, Context: ctxName, Code: code})
	if r.Error != nil || r.Result == nil {
		w.t.Fatalf("run %s/%s %q: %+v", lang, ctxName, code, r.Error)
	}
	return r.Result
}

func mainOf(res *cell.Result) string {
	if m := res.MainResult(); m != nil {
		return m.Data[cell.MIMEText]
	}
	return fmt.Sprintf("<%s: %+v>", res.Status, res.Error)
}

func errCode(r proto.Response) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}

// A run reaches the session of its language and context: aliases parse,
// TypeScript shares JavaScript's, a context is made by its first cell.
func TestRunPicksTheSession(t *testing.T) {
	w := dialAgent(t, fakeRegistry(t))
	w.run("", "", "x=py")
	w.run("js", "", "x=js")
	w.run("bash", "a", "x=sh-a")
	for _, c := range []struct{ lang, ctx, want, ran string }{
		{"python", "default", "py", "python/default python"},
		{"typescript", "", "js", "node typescript"},
		{"javascript", cell.DefaultContext, "js", "node javascript"},
		{"sh", "a", "sh-a", "bash bash"},
	} {
		res := w.run(c.lang, c.ctx, "x")
		if got := mainOf(res); got != c.want || res.Stdout != c.ran {
			t.Errorf("%s/%s: x = %s in %q, want %s in %q", c.lang, c.ctx, got, res.Stdout, c.want, c.ran)
		}
	}
	if res := w.run("bash", "", "x"); res.Error == nil {
		t.Fatalf("bash's default sees context a's x: %+v", res)
	}
	// A restart reaches its session alone; a missing named one is not found.
	if r := w.do(proto.Request{Op: proto.OpRestart, Language: "ts"}); r.Error != nil {
		t.Fatal(r.Error)
	}
	if got := mainOf(w.run("js", "", "x")); !strings.Contains(got, "NameError") {
		t.Fatalf("js x = %s after its restart", got)
	}
	if got := mainOf(w.run("", "", "x")); got != "py" {
		t.Fatalf("python x = %s after js's restart", got)
	}
	if r := w.do(proto.Request{Op: proto.OpRestart, Language: "python", Context: "nope"}); errCode(r) != proto.CodeNotFound {
		t.Fatalf("restart of a missing context: %+v", r.Error)
	}
}

// OpContext creates, lists and deletes, each refusal with its code.
func TestContextOps(t *testing.T) {
	w := dialAgent(t, fakeRegistry(t))
	ctxOp := func(op proto.ContextOp) proto.Response {
		return w.do(proto.Request{Op: proto.OpContext, ContextOp: &op})
	}
	if r := ctxOp(proto.ContextOp{Action: proto.ContextList}); r.Error != nil || len(r.Contexts) != 0 {
		t.Fatalf("list of a new sandbox: %+v %+v", r.Error, r.Contexts)
	}
	cwd := t.TempDir()
	r := ctxOp(proto.ContextOp{Action: proto.ContextCreate, Language: "ts", Name: "a", Cwd: cwd})
	if r.Error != nil || len(r.Contexts) != 1 || r.Contexts[0] != (proto.ContextInfo{Language: "javascript", Name: "a", Cwd: cwd}) {
		t.Fatalf("create: %+v %+v", r.Error, r.Contexts)
	}
	for _, c := range []struct {
		op   proto.ContextOp
		code string
	}{
		{proto.ContextOp{Action: proto.ContextCreate, Language: "js", Name: "a"}, proto.CodeExists},
		{proto.ContextOp{Action: proto.ContextCreate, Language: "js", Name: cell.DefaultContext}, proto.CodeBadRequest},
		{proto.ContextOp{Action: proto.ContextCreate, Language: "js", Name: "b", Cwd: cwd + "/missing"}, proto.CodeBadRequest},
		{proto.ContextOp{Action: proto.ContextDelete, Language: "python", Name: "a"}, proto.CodeNotFound},
		{proto.ContextOp{Action: proto.ContextDelete, Language: "bash", Name: cell.DefaultContext}, proto.CodeBadRequest},
	} {
		if r := ctxOp(c.op); errCode(r) != c.code {
			t.Errorf("%+v: %+v, want code %s", c.op, r.Error, c.code)
		}
	}
	w.run("", "", "y=1")
	r = ctxOp(proto.ContextOp{Action: proto.ContextList})
	if r.Error != nil || len(r.Contexts) != 2 || r.Contexts[0].Name != cell.DefaultContext || !r.Contexts[0].Running || r.Contexts[1].Name != "a" {
		t.Fatalf("list: %+v %+v", r.Error, r.Contexts)
	}
	if r := ctxOp(proto.ContextOp{Action: proto.ContextDelete, Language: "javascript", Name: "a"}); r.Error != nil {
		t.Fatal(r.Error)
	}
	if r := ctxOp(proto.ContextOp{Action: proto.ContextList}); len(r.Contexts) != 1 {
		t.Fatalf("list after delete: %+v", r.Contexts)
	}
}

// Past cell.MaxContexts sessions, a cell of a new one is refused as full;
// the connection and the other sessions go on.
func TestRunPastTheContextLimit(t *testing.T) {
	w := dialAgent(t, fakeRegistry(t))
	for i := 1; i < cell.MaxContexts; i++ {
		w.run("", fmt.Sprintf("c%d", i), "x=1")
	}
	r := w.do(proto.Request{Op: proto.OpRun, Language: "bash", Code: "x"})
	if errCode(r) != proto.CodeFull || !strings.Contains(r.Error.Message, "at most 16") {
		t.Fatalf("a 17th session: %+v", r.Error)
	}
	if got := mainOf(w.run("", "c3", "x")); got != "1" {
		t.Fatalf("c3 x = %s", got)
	}
}

// plainInterp is an Interpreter without sessions (the tests' fakes).
type plainInterp struct{ restarts int }

func (p *plainInterp) Run(context.Context, string, time.Duration, func(cell.Event)) (cell.Result, error) {
	return cell.Result{Status: cell.StatusOK, Stdout: "ran"}, nil
}
func (p *plainInterp) Interrupt() bool { return false }
func (p *plainInterp) Restart() error  { p.restarts++; return nil }
func (p *plainInterp) Exec(context.Context, []string, io.Reader, time.Duration) (cell.ExecResult, error) {
	return cell.ExecResult{}, errors.New("no")
}

// An interpreter without sessions runs Python's default one; the others
// and contexts are refused as unsupported.
func TestWithoutSessions(t *testing.T) {
	p := &plainInterp{}
	w := dialAgent(t, p)
	if res := w.run("python", cell.DefaultContext, "1"); res.Stdout != "ran" {
		t.Fatalf("python's default: %+v", res)
	}
	if r := w.do(proto.Request{Op: proto.OpRestart}); r.Error != nil || p.restarts != 1 {
		t.Fatalf("restart: %+v, %d restarts", r.Error, p.restarts)
	}
	for _, req := range []proto.Request{
		{Op: proto.OpRun, Language: "js", Code: "1"},
		{Op: proto.OpRun, Context: "a", Code: "1"},
		{Op: proto.OpRestart, Language: "bash"},
		{Op: proto.OpContext, ContextOp: &proto.ContextOp{Action: proto.ContextList}},
	} {
		if r := w.do(req); errCode(r) != proto.CodeUnsupported {
			t.Errorf("%s %s/%s: %+v, want unsupported", req.Op, req.Language, req.Context, r.Error)
		}
	}
	if p.restarts != 1 {
		t.Fatalf("%d restarts", p.restarts)
	}
}
