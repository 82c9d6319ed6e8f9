package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// events collects a process stream's events for the API tests.
type events struct {
	mu   sync.Mutex
	evs  []sandbox.ProcessEvent
	seen chan struct{}
}

func newEvents() *events { return &events{seen: make(chan struct{}, 1000)} }

func (e *events) on(ev sandbox.ProcessEvent) error {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	e.seen <- struct{}{}
	return nil
}

func (e *events) text(kind string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var b strings.Builder
	for _, ev := range e.evs {
		if ev.Kind == kind {
			b.Write(ev.Data)
		}
	}
	return b.String()
}

func (e *events) pid() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Kind == sandbox.ProcessStart {
			return ev.PID
		}
	}
	return 0
}

func (e *events) waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for !cond() {
		select {
		case <-e.seen:
		case <-deadline:
			t.Fatalf("timed out; events %+v", e.evs)
		}
	}
}

func TestProcessStreamOverAPI(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ev := newEvents()
	exit, err := e.client.StartProcess(context.Background(), id, sandbox.ProcessRequest{Argv: []string{"echo", "a", "b"}}, ev.on)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 || ev.text(sandbox.ProcessStdout) != "a b\n" || ev.pid() == 0 {
		t.Fatalf("exit %+v events %+v", exit, ev.evs)
	}
	if first, last := ev.evs[0], ev.evs[len(ev.evs)-1]; first.Kind != sandbox.ProcessStart || last.Kind != sandbox.ProcessEnd || last.Exit == nil {
		t.Fatalf("events %+v", ev.evs)
	}
	// A program that cannot start is an end event, not an error.
	exit, err = e.client.StartProcess(context.Background(), id, sandbox.ProcessRequest{Argv: []string{"nope"}}, nil)
	if err != nil || exit.Error == "" {
		t.Fatalf("exit %+v err %v", exit, err)
	}
}

func TestProcessBackgroundListAttachSignal(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	status, _, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/processes", jsonBody(`{"argv":["sleep","60"],"tag":"srv","env":{"A":"1"}}`))
	var started ProcessStarted
	if status != http.StatusOK || json.Unmarshal(body, &started) != nil || started.PID == 0 || started.Exit != nil {
		t.Fatalf("start: %d %s", status, body)
	}
	// The process outlives the request that started it.
	list, err := e.client.ListProcesses(context.Background(), id)
	if err != nil || len(list) != 1 || list[0].PID != started.PID || list[0].Tag != "srv" || list[0].User != sandbox.GuestUserCell || len(list[0].EnvNames) != 1 {
		t.Fatalf("list %+v err %v", list, err)
	}
	ev := newEvents()
	done := make(chan sandbox.ProcessExit, 1)
	go func() {
		exit, err := e.client.AttachProcess(context.Background(), id, started.PID, ev.on)
		if err != nil {
			t.Error(err)
		}
		done <- exit
	}()
	time.Sleep(50 * time.Millisecond)
	if err := e.client.SignalProcess(context.Background(), id, started.PID, sandbox.SignalTerm); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-done:
		if exit.Signal != sandbox.SignalTerm || exit.ExitCode != -1 {
			t.Fatalf("exit %+v", exit)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("attach did not end")
	}
	if list, _ := e.client.ListProcesses(context.Background(), id); len(list) != 0 {
		t.Fatalf("list after the kill: %+v", list)
	}
	err = e.client.SignalProcess(context.Background(), id, started.PID, sandbox.SignalKill)
	wantClientError(t, "signal an ended process", err, http.StatusNotFound, CodeNotFound)
	_, err = e.client.AttachProcess(context.Background(), id, started.PID, nil)
	wantClientError(t, "attach an ended process", err, http.StatusNotFound, CodeNotFound)
}

// Hanging up a stream leaves the process running.
func TestProcessOutlivesHangUp(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	hangUp := errors.New("hang up")
	pid := 0
	_, err := e.client.StartProcess(context.Background(), id, sandbox.ProcessRequest{Argv: []string{"sleep", "60"}}, func(ev sandbox.ProcessEvent) error {
		pid = ev.PID
		return hangUp
	})
	if !errors.Is(err, hangUp) || pid == 0 {
		t.Fatalf("err %v pid %d", err, pid)
	}
	time.Sleep(50 * time.Millisecond) // the server sees the hang-up
	list, err := e.client.ListProcesses(context.Background(), id)
	if err != nil || len(list) != 1 || list[0].PID != pid {
		t.Fatalf("list %+v err %v", list, err)
	}
}

func TestProcessPTYInputResize(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ev := newEvents()
	done := make(chan sandbox.ProcessExit, 1)
	go func() {
		exit, err := e.client.StartProcess(context.Background(), id, sandbox.ProcessRequest{Argv: []string{"bash"}, PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}}, ev.on)
		if err != nil {
			t.Error(err)
		}
		done <- exit
	}()
	ev.waitFor(t, func() bool { return ev.pid() != 0 })
	pid := ev.pid()
	ctx := context.Background()
	if err := e.client.SendInput(ctx, id, pid, []byte("echo hi\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := e.client.ResizePTY(ctx, id, pid, sandbox.PTYSize{Cols: 100, Rows: 40}); err != nil {
		t.Fatal(err)
	}
	ev.waitFor(t, func() bool { return strings.Contains(ev.text(sandbox.ProcessPTY), "resized 100x40") })
	if err := e.client.SendInput(ctx, id, pid, []byte("exit\n"), false); err != nil {
		t.Fatal(err)
	}
	if exit := <-done; exit.ExitCode != 0 || !strings.Contains(ev.text(sandbox.ProcessPTY), "echo hi") {
		t.Fatalf("exit %+v pty %q", exit, ev.text(sandbox.ProcessPTY))
	}
}

func TestProcessBadRequests(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	status, _, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/processes", jsonBody(`{"argv":["sleep","60"]}`))
	var started ProcessStarted
	if status != http.StatusOK || json.Unmarshal(body, &started) != nil || started.PID == 0 {
		t.Fatalf("start: %d %s", status, body)
	}
	pid := fmt.Sprint(started.PID)
	for _, c := range []struct {
		what, method, path, body string
		status                   int
		code                     string
	}{
		{"root in a sandbox without root", "POST", "/processes", `{"argv":["sleep","1"],"user":"root"}`, 403, CodeForbidden},
		{"an unknown user", "POST", "/processes", `{"argv":["sleep","1"],"user":"bob"}`, 400, CodeInvalid},
		{"empty argv", "POST", "/processes", `{"argv":[]}`, 400, CodeInvalid},
		{"a pty too large", "POST", "/processes", `{"argv":["sh"],"pty":{"cols":5000,"rows":2}}`, 400, CodeInvalid},
		{"a negative timeout", "POST", "/processes", `{"argv":["sh"],"timeout_ms":-1}`, 400, CodeInvalid},
		{"an unknown field", "POST", "/processes", `{"argv":["sh"],"shell":true}`, 400, CodeInvalid},
		{"a pid that is not a number", "POST", "/processes/abc/signal", `{"signal":"SIGTERM"}`, 400, CodeInvalid},
		{"an unknown pid", "POST", "/processes/4242/signal", `{"signal":"SIGTERM"}`, 404, CodeNotFound},
		{"a signal not sent", "POST", "/processes/" + pid + "/signal", `{"signal":"SIGSTOP"}`, 400, CodeInvalid},
		{"input without stdin", "POST", "/processes/" + pid + "/stdin", `{"data":"x"}`, 400, CodeInvalid},
		{"input as text and base64", "POST", "/processes/" + pid + "/stdin", `{"data":"x","data_base64":"eA=="}`, 400, CodeInvalid},
		{"resize without a terminal", "POST", "/processes/" + pid + "/resize", `{"cols":10,"rows":10}`, 400, CodeInvalid},
		{"resize to zero", "POST", "/processes/" + pid + "/resize", `{"cols":0,"rows":10}`, 400, CodeInvalid},
	} {
		status, _, body := e.do(t, c.method, "/v1/sandboxes/"+id+c.path, jsonBody(c.body))
		wantAPIError(t, c.what, status, body, c.status, c.code)
	}
	status, _, body = e.do(t, "GET", "/v1/sandboxes/sb-nope/processes", nil)
	wantAPIError(t, "an unknown sandbox", status, body, 404, CodeNotFound)
	status, _, body = e.do(t, "GET", "/v1/sandboxes/"+id+"/processes/4242/attach", nil)
	wantAPIError(t, "attach to an unknown pid", status, body, 404, CodeNotFound)
	// Nothing was left behind by the refused requests.
	if list, _ := e.client.ListProcesses(context.Background(), id); len(list) != 1 {
		t.Fatalf("list %+v", list)
	}
}

func TestProcessMaxProcesses(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	for i := 0; i < sandbox.MaxProcesses; i++ {
		status, _, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/processes", jsonBody(`{"argv":["sleep","60"]}`))
		if status != http.StatusOK {
			t.Fatalf("start %d: %d %s", i, status, body)
		}
	}
	status, _, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/processes", jsonBody(`{"argv":["sleep","60"]}`))
	wantAPIError(t, "one process too many", status, body, http.StatusServiceUnavailable, CodeFull)
}

// TestProcessTenants: another tenant's sandbox's processes are a 404 on
// every process route, as if the sandbox did not exist.
func TestProcessTenants(t *testing.T) {
	e := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return tenant.New(m, tenant.Options{}) }, nil)
	ctx := context.Background()
	alpha, beta := e.client.ForTenant("alpha"), e.client.ForTenant("beta")
	info, err := alpha.Create(ctx, sandboxConfigForTest())
	if err != nil {
		t.Fatal(err)
	}
	pid := 0
	_, err = alpha.StartProcess(ctx, info.ID, sandbox.ProcessRequest{Argv: []string{"sleep", "60"}, Stdin: true}, func(ev sandbox.ProcessEvent) error {
		pid = ev.PID
		return errors.New("hang up")
	})
	if pid == 0 {
		t.Fatalf("alpha's start: %v", err)
	}
	_, err = beta.StartProcess(ctx, info.ID, sandbox.ProcessRequest{Argv: []string{"echo"}}, nil)
	wantClientError(t, "beta starts", err, http.StatusNotFound, CodeNotFound)
	_, err = beta.ListProcesses(ctx, info.ID)
	wantClientError(t, "beta lists", err, http.StatusNotFound, CodeNotFound)
	_, err = beta.AttachProcess(ctx, info.ID, pid, nil)
	wantClientError(t, "beta attaches", err, http.StatusNotFound, CodeNotFound)
	wantClientError(t, "beta writes", beta.SendInput(ctx, info.ID, pid, []byte("x"), false), http.StatusNotFound, CodeNotFound)
	wantClientError(t, "beta signals", beta.SignalProcess(ctx, info.ID, pid, sandbox.SignalKill), http.StatusNotFound, CodeNotFound)
	wantClientError(t, "beta resizes", beta.ResizePTY(ctx, info.ID, pid, sandbox.PTYSize{Cols: 9, Rows: 9}), http.StatusNotFound, CodeNotFound)
	if list, err := alpha.ListProcesses(ctx, info.ID); err != nil || len(list) != 1 {
		t.Fatalf("alpha's list after beta's tries: %+v %v", list, err)
	}
}
