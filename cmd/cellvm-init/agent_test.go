package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/guestinit/interp"
	"github.com/cellvm/cellvm/guestinit/pid1"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// TestAgentMainServesAndShutsDown runs the agent process's main on a Unix
// socket and drives it with the host client: health, a command, and the
// shutdown request, which must end it with ExitShutdown (PID 1's cue).
func TestAgentMainServesAndShutsDown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	code := make(chan int, 1)
	go func() { code <- agentMain([]string{"-listen", "unix:" + sock, "-dir", t.TempDir()}) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	if err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := c.Health(ctx); err != nil || h.Agent != "cellvm-init" {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	res, err := c.Exec(ctx, []string{"/bin/echo", "hi"}, nil, 5*time.Second)
	if err != nil || res.Stdout != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-code:
		if got != pid1.ExitShutdown {
			t.Fatalf("agentMain returned %d, want %d", got, pid1.ExitShutdown)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agentMain did not return after shutdown")
	}
}

// TestAgentMainServesSessions drives the agent process's main over the
// wire with cells in two Python contexts and a context list: the sessions
// registry is what it serves.
func TestAgentMainServesSessions(t *testing.T) {
	if _, err := os.Stat(interp.DefaultPython); err != nil {
		t.Skipf("no %s: %v", interp.DefaultPython, err)
	}
	sock := filepath.Join(t.TempDir(), "agent.sock")
	code := make(chan int, 1)
	go func() {
		code <- agentMain([]string{"-listen", "unix:" + sock, "-dir", t.TempDir(), "-python", interp.DefaultPython})
	}()
	var nc net.Conn
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if nc, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	defer nc.Close()
	c := proto.NewConn(nc, proto.MaxAgentMessage)
	if err := c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version}); err != nil {
		t.Fatal(err)
	}
	var h proto.Hello
	if err := c.ReadJSON(proto.TypeHello, &h); err != nil {
		t.Fatal(err)
	}
	do := func(req proto.Request) proto.Response {
		t.Helper()
		if err := c.WriteJSON(proto.TypeRequest, req); err != nil {
			t.Fatal(err)
		}
		for {
			m, err := c.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if m.Type == proto.TypeResponse {
				var r proto.Response
				if err := json.Unmarshal(m.Payload, &r); err != nil || r.Error != nil {
					t.Fatalf("%s: %v %+v", req.Op, err, r.Error)
				}
				return r
			}
		}
	}
	do(proto.Request{Op: proto.OpRun, Code: "x = 1", TimeoutMS: 30000})
	do(proto.Request{Op: proto.OpRun, Context: "a", Code: "x = 2", TimeoutMS: 30000})
	for ctxName, want := range map[string]string{"": "1", "a": "2"} {
		r := do(proto.Request{Op: proto.OpRun, Context: ctxName, Code: "x", TimeoutMS: 30000})
		if m := r.Result.MainResult(); m == nil || m.Data["text/plain"] != want {
			t.Fatalf("context %q: %+v, want x = %s", ctxName, r.Result, want)
		}
	}
	r := do(proto.Request{Op: proto.OpContext, ContextOp: &proto.ContextOp{Action: proto.ContextList}})
	if len(r.Contexts) != 2 || r.Contexts[0].Name != "a" || r.Contexts[1].Name != "default" {
		t.Fatalf("contexts %+v", r.Contexts)
	}
	do(proto.Request{Op: proto.OpShutdown})
	nc.Close()
	select {
	case got := <-code:
		if got != pid1.ExitShutdown {
			t.Fatalf("agentMain returned %d", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agentMain did not return after shutdown")
	}
}
