package agentclient

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// sessionGuest is a guest agent that records the requests it gets and
// answers them as answer says (nil: an empty response).
type sessionGuest struct {
	answer func(req proto.Request) proto.Response

	mu   sync.Mutex
	reqs []proto.Request
}

func (g *sessionGuest) requests() []proto.Request {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]proto.Request(nil), g.reqs...)
}

// serveSessions returns a Client of g, which answers on a Unix socket.
func serveSessions(t *testing.T, g *sessionGuest) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go g.serve(nc)
		}
	}()
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(func() { c.Close(); ln.Close() })
	return c
}

func (g *sessionGuest) serve(nc net.Conn) {
	defer nc.Close()
	c := proto.NewConn(nc, proto.MaxRequest)
	var h proto.Hello
	if c.ReadJSON(proto.TypeHello, &h) != nil || c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version, Software: "session-guest"}) != nil {
		return
	}
	for {
		var req proto.Request
		if c.ReadJSON(proto.TypeRequest, &req) != nil {
			return
		}
		g.mu.Lock()
		g.reqs = append(g.reqs, req)
		g.mu.Unlock()
		var resp proto.Response
		if g.answer != nil {
			resp = g.answer(req)
		}
		if resp.Result != nil {
			ev := proto.Event{Event: cell.Event{Type: cell.EventStdout, Text: resp.Result.Stdout}}
			if c.WriteJSON(proto.TypeEvent, ev) != nil {
				return
			}
		}
		if c.WriteJSON(proto.TypeResponse, resp) != nil {
			return
		}
	}
}

// TestSessionsOnTheWire: a cell and a restart carry their session to the
// guest, Python's default one as no fields at all (a guest that predates
// sessions takes it); the events of a session's cell stream as Python's do.
func TestSessionsOnTheWire(t *testing.T) {
	g := &sessionGuest{answer: func(req proto.Request) proto.Response {
		if req.Op == proto.OpRun {
			return proto.Response{Result: &cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: req.Language + "/" + req.Context + "\n"}}
		}
		return proto.Response{}
	}}
	c := serveSessions(t, g)
	ctx := ctxT(t)
	cases := []struct {
		sess           Session
		lang, ctxName  string
		stdout, stream string
	}{
		{Session{}, "", "", "/\n", "/\n"},
		{Session{Language: cell.Python, Context: cell.DefaultContext}, "", "", "/\n", "/\n"},
		{Session{Language: cell.JavaScript}, "javascript", "", "javascript/\n", ""},
		{Session{Language: cell.TypeScript, Context: "work"}, "typescript", "work", "typescript/work\n", ""},
		{Session{Language: cell.Bash, Context: "b-1"}, "bash", "b-1", "bash/b-1\n", ""},
	}
	for _, tc := range cases {
		var streamed strings.Builder
		res, err := c.RunSessionCell(ctx, tc.sess, "1", time.Second, func(e cell.Event) {
			if e.Type == cell.EventStdout {
				streamed.WriteString(e.Text)
			}
		})
		if err != nil || res.Stdout != tc.stdout || streamed.String() != tc.stdout {
			t.Errorf("RunSessionCell(%+v) = %q (streamed %q), %v; want %q", tc.sess, res.Stdout, streamed.String(), err, tc.stdout)
		}
		if err := c.RestartSession(ctx, tc.sess); err != nil {
			t.Errorf("RestartSession(%+v): %v", tc.sess, err)
		}
	}
	if _, err := c.RunCell(ctx, "1", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	reqs := g.requests()
	if len(reqs) != 2*len(cases)+2 {
		t.Fatalf("the guest got %d requests, want %d", len(reqs), 2*len(cases)+2)
	}
	for i, tc := range cases {
		for _, r := range reqs[2*i : 2*i+2] {
			if r.Language != tc.lang || r.Context != tc.ctxName {
				t.Errorf("%s of %+v went as language %q context %q, want %q %q", r.Op, tc.sess, r.Language, r.Context, tc.lang, tc.ctxName)
			}
		}
	}
	for _, r := range reqs[len(reqs)-2:] {
		if r.Language != "" || r.Context != "" {
			t.Errorf("RunCell/Restart sent a session: %+v", r)
		}
	}
}

// TestContextOps: list, create and delete reach the guest as OpContext
// with their arguments; the answers come back; a guest that answers a
// create with nothing or another session's list still gives the one
// created; bad arguments are refused before the guest sees them; a guest
// error is the caller's error.
func TestContextOps(t *testing.T) {
	var listed []proto.ContextInfo
	g := &sessionGuest{answer: func(req proto.Request) proto.Response {
		if req.Op != proto.OpContext {
			return proto.Response{Error: &proto.Error{Code: proto.CodeInternal, Message: "not a context op"}}
		}
		op := req.ContextOp
		switch {
		case op.Action == proto.ContextList:
			return proto.Response{Contexts: listed}
		case op.Action == proto.ContextCreate && op.Name == "quiet":
			return proto.Response{}
		case op.Action == proto.ContextCreate && op.Name == "other":
			return proto.Response{Contexts: []proto.ContextInfo{{Language: "python", Name: "other", Cwd: "/elsewhere"}}}
		case op.Action == proto.ContextCreate && op.Name == "taken":
			return proto.Response{Error: &proto.Error{Code: proto.CodeBadRequest, Message: "context taken exists"}}
		case op.Action == proto.ContextCreate:
			return proto.Response{Contexts: []proto.ContextInfo{{Language: "javascript", Name: op.Name, Cwd: op.Cwd}}}
		}
		return proto.Response{}
	}}
	c := serveSessions(t, g)
	ctx := ctxT(t)

	if cs, err := c.Contexts(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("Contexts of none = %+v, %v", cs, err)
	}
	listed = []proto.ContextInfo{{Language: "python", Name: "default", Running: true}, {Language: "javascript", Name: "w", Cwd: "/tmp"}}
	if cs, err := c.Contexts(ctx); err != nil || len(cs) != 2 || cs[1] != listed[1] {
		t.Fatalf("Contexts = %+v, %v; want %+v", cs, err, listed)
	}
	ci, err := c.CreateContext(ctx, Session{Language: cell.TypeScript, Context: "w2"}, "/tmp")
	if err != nil || ci != (proto.ContextInfo{Language: "javascript", Name: "w2", Cwd: "/tmp"}) {
		t.Errorf("CreateContext(ts w2) = %+v, %v", ci, err)
	}
	ci, err = c.CreateContext(ctx, Session{Language: cell.Bash, Context: "quiet"}, "")
	if err != nil || ci != (proto.ContextInfo{Language: "bash", Name: "quiet"}) {
		t.Errorf("CreateContext answered by nothing = %+v, %v", ci, err)
	}
	ci, err = c.CreateContext(ctx, Session{Language: cell.JavaScript, Context: "other"}, "/w")
	if err != nil || ci != (proto.ContextInfo{Language: "javascript", Name: "other", Cwd: "/w"}) {
		t.Errorf("CreateContext answered by another session = %+v, %v", ci, err)
	}
	var pe *proto.Error
	if _, err := c.CreateContext(ctx, Session{Language: cell.Bash, Context: "taken"}, ""); !errors.As(err, &pe) || !strings.Contains(pe.Message, "exists") {
		t.Errorf("CreateContext refused by the guest: %v, want its error", err)
	}
	if err := c.DeleteContext(ctx, Session{Language: cell.Bash, Context: "w"}); err != nil {
		t.Errorf("DeleteContext: %v", err)
	}

	before := len(g.requests())
	for _, bad := range []struct {
		sess Session
		cwd  string
	}{
		{Session{Language: cell.JavaScript}, ""},                 // no name
		{Session{Language: "cobol", Context: "x"}, ""},           // no such language
		{Session{Language: cell.Bash, Context: "../x"}, ""},      // a bad name
		{Session{Language: cell.Bash, Context: "x"}, "relative"}, // a relative cwd
	} {
		if _, err := c.CreateContext(ctx, bad.sess, bad.cwd); err == nil {
			t.Errorf("CreateContext(%+v, %q) passed", bad.sess, bad.cwd)
		}
	}
	if err := c.DeleteContext(ctx, Session{Language: cell.Bash}); err == nil {
		t.Error("DeleteContext of a default session passed")
	}
	if n := len(g.requests()); n != before {
		t.Errorf("bad context ops reached the guest: %d requests", n-before)
	}

	reqs := g.requests()
	want := []proto.ContextOp{
		{Action: "list"}, {Action: "list"},
		{Action: "create", Language: "typescript", Name: "w2", Cwd: "/tmp"},
		{Action: "create", Language: "bash", Name: "quiet"},
		{Action: "create", Language: "javascript", Name: "other", Cwd: "/w"},
		{Action: "create", Language: "bash", Name: "taken"},
		{Action: "delete", Language: "bash", Name: "w"},
	}
	if len(reqs) != len(want) {
		t.Fatalf("the guest got %d requests, want %d", len(reqs), len(want))
	}
	for i, r := range reqs {
		if r.Op != proto.OpContext || r.ContextOp == nil || *r.ContextOp != want[i] {
			t.Errorf("request %d: %+v %+v, want %+v", i, r, r.ContextOp, want[i])
		}
	}
}

// TestContextAnswerOfAnotherOp: a guest that answers a context op with a
// cell's result broke the protocol.
func TestContextAnswerOfAnotherOp(t *testing.T) {
	g := &sessionGuest{answer: func(req proto.Request) proto.Response {
		return proto.Response{Exec: &cell.ExecResult{}}
	}}
	c := serveSessions(t, g)
	if _, err := c.Contexts(ctxT(t)); !errors.Is(err, ErrProtocol) {
		t.Errorf("Contexts answered by an exec result: %v, want ErrProtocol", err)
	}
}
