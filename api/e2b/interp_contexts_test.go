package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// sessionsFake is the double with sessions: contexts created, listed and
// deleted, and a cell "session?" that prints the session it ran in.
type sessionsFake struct {
	*sandboxtest.Manager
	mu       sync.Mutex
	ctxs     []sandbox.ContextInfo
	restarts []sandbox.Session
}

func (m *sessionsFake) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	if c.Code != "session?" {
		return m.Manager.RunCell(ctx, id, c, onEvent)
	}
	out := fmt.Sprintf("%s/%s", c.Language, c.Context)
	res := cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: out}
	onEvent(cell.Event{Type: cell.EventStdout, Text: out})
	onEvent(cell.Event{Type: cell.EventEnd, End: &res})
	return res, nil
}

func (m *sessionsFake) Restart(ctx context.Context, id string, s sandbox.Session) error {
	m.mu.Lock()
	m.restarts = append(m.restarts, s)
	m.mu.Unlock()
	if s.Context != "" {
		return nil // a session of this fake's, not the double's
	}
	return m.Manager.Restart(ctx, id, s)
}

func (m *sessionsFake) Contexts(ctx context.Context, id string) ([]sandbox.ContextInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]sandbox.ContextInfo{{Language: cell.Python, Name: cell.DefaultContext, Running: true}}, m.ctxs...), nil
}

func (m *sessionsFake) CreateContext(ctx context.Context, id string, spec sandbox.ContextSpec) (sandbox.ContextInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.ctxs) >= 2 {
		return sandbox.ContextInfo{}, fmt.Errorf("%w: too many contexts", sandbox.ErrQuota)
	}
	lang := spec.Language
	if lang == cell.TypeScript {
		lang = cell.JavaScript // a Node session, as the guest lists it
	}
	ci := sandbox.ContextInfo{Language: lang, Name: spec.Name, Cwd: spec.Cwd}
	m.ctxs = append(m.ctxs, ci)
	return ci, nil
}

func (m *sessionsFake) DeleteContext(ctx context.Context, id string, s sandbox.Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, ci := range m.ctxs {
		if ci.Name == s.Context {
			m.ctxs = slices.Delete(m.ctxs, i, i+1)
			return nil
		}
	}
	return fmt.Errorf("%w: no context %s", sandbox.ErrNotFound, s.Context)
}

func interpDo(t *testing.T, url, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestExecuteLanguages: runCode's language picks the language's default
// session, its context_id a named one; an unknown language is 400 naming
// cellvm's.
func TestExecuteLanguages(t *testing.T) {
	base, id := interpFakeSandbox(t)
	m := &sessionsFake{Manager: base}
	srv := envdTestServer(t, m, id, 49999)
	for _, c := range []struct{ body, want string }{
		{`{"code":"session?"}`, "/"},
		{`{"code":"session?","language":"python"}`, "/"},
		{`{"code":"session?","language":"python3"}`, "/"},
		{`{"code":"session?","language":"js"}`, "javascript/"},
		{`{"code":"session?","language":"typescript"}`, "typescript/"},
		{`{"code":"session?","language":"bash"}`, "bash/"},
		{`{"code":"session?","context_id":"default"}`, "/"},
		{`{"code":"session?","context_id":"bash-default"}`, "bash/"},
		{`{"code":"session?","context_id":"typescript-default"}`, "typescript/"},
	} {
		code, lines := runCode(t, srv.URL, c.body)
		if code != 200 || lines[0]["text"] != c.want {
			t.Errorf("%s: %d %v; want stdout %q", c.body, code, lines, c.want)
		}
	}
	for _, body := range []string{`{"code":"1","language":"r"}`, `{"code":"1","language":"cobol"}`} {
		code, lines := runCode(t, srv.URL, body)
		if code != 400 || !strings.Contains(lines[0]["body"].(string), "python, javascript (js), typescript (ts), bash") {
			t.Errorf("%s: %d %v", body, code, lines)
		}
	}
}

// TestContexts: createCodeContext, listCodeContexts, runCode in a
// context, restartCodeContext and removeCodeContext, as the SDK calls
// them.
func TestContexts(t *testing.T) {
	base, id := interpFakeSandbox(t)
	m := &sessionsFake{Manager: base}
	srv := envdTestServer(t, m, id, 49999)
	do := func(method, path, body string) (int, string) { return interpDo(t, srv.URL, method, path, body) }

	code, body := do("GET", "/contexts", "")
	var list []interpContext
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list) != 1 || list[0] != interpDefault() {
		t.Fatalf("list: %d %s", code, body)
	}
	var ts, sh interpContext
	if code, body := do("POST", "/contexts", `{"language":"ts","cwd":"/tmp"}`); code != 200 || json.Unmarshal([]byte(body), &ts) != nil ||
		!strings.HasPrefix(ts.ID, "e2b-ts-") || ts.Language != "typescript" || ts.Cwd != "/tmp" {
		t.Fatalf("create ts: %d %s", code, body)
	}
	if code, body := do("POST", "/contexts", `{"language":"bash"}`); code != 200 || json.Unmarshal([]byte(body), &sh) != nil ||
		!strings.HasPrefix(sh.ID, "e2b-sh-") || sh.Language != "bash" || sh.Cwd != interpCwd {
		t.Fatalf("create bash: %d %s", code, body)
	}
	// The list has them, the TypeScript one still TypeScript.
	code, body = do("GET", "/contexts", "")
	if json.Unmarshal([]byte(body), &list) != nil || !slices.Equal(list, []interpContext{interpDefault(), ts, sh}) {
		t.Errorf("list: %d %s; want default, %v, %v", code, body, ts, sh)
	}
	if _, lines := runCode(t, srv.URL, `{"code":"session?","context_id":"`+ts.ID+`"}`); lines[0]["text"] != "typescript/"+ts.ID {
		t.Errorf("runCode in the ts context: %v", lines)
	}
	if _, lines := runCode(t, srv.URL, `{"code":"session?","context_id":"`+sh.ID+`","language":"sh"}`); lines[0]["text"] != "bash/"+sh.ID {
		t.Errorf("runCode in the bash context, its language given too: %v", lines)
	}
	if code, body := do("POST", "/contexts/"+sh.ID+"/restart", ""); code != 204 {
		t.Errorf("restart: %d %s", code, body)
	}
	if code, body := do("POST", "/contexts/javascript-default/restart", ""); code != 204 {
		t.Errorf("restart javascript-default: %d %s", code, body)
	}
	if want := []sandbox.Session{{Language: cell.Bash, Context: sh.ID}, {Language: cell.JavaScript}}; !slices.Equal(m.restarts, want) {
		t.Errorf("restarts %v, want %v", m.restarts, want)
	}
	// The fake's limit: ErrQuota is 429.
	if code, body := do("POST", "/contexts", `{}`); code != 429 {
		t.Errorf("create beyond the limit: %d %s", code, body)
	}
	if code, body := do("DELETE", "/contexts/"+ts.ID, ""); code != 204 {
		t.Errorf("delete: %d %s", code, body)
	}
	if code, _ := runCode(t, srv.URL, `{"code":"1","context_id":"`+ts.ID+`"}`); code != 404 {
		t.Errorf("runCode in a removed context: %d", code)
	}
	for _, c := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{"POST", "/contexts", `{"language":"r"}`, 400, "javascript (js)"},
		{"POST", "/contexts", `{"language":"js","cwd":"rel"}`, 400, "absolute"},
		{"POST", "/contexts", `{"language":`, 400, "JSON"},
		{"POST", "/contexts/other/restart", "", 404, "not found"},
		{"POST", "/contexts/" + ts.ID + "/restart", "", 404, "not found"},
		{"POST", "/contexts/..%2f..%2fx/restart", "", 404, ""},
		{"DELETE", "/contexts/.hidden", "", 404, "not found"},
		{"DELETE", "/contexts/other", "", 404, "not found"},
		{"DELETE", "/contexts/default", "", 501, "restart it instead"},
		{"DELETE", "/contexts/bash-default", "", 501, "restart it instead"},
		{"GET", "/contexts/default/frob", "", 404, "no such"},
		{"GET", "/contexts/default/restart", "", 405, "POST"},
		{"GET", "/nothing", "", 404, "no such"},
	} {
		if code, body := do(c.method, c.path, c.body); code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s %s %s: %d %q; want %d saying %q", c.method, c.path, c.body, code, body, c.code, c.says)
		}
	}
	// Python's default context is still the interpreter, and restarts.
	runCode(t, srv.URL, `{"code":"x = 1"}`)
	if code, body := do("POST", "/contexts/default/restart", ""); code != 204 {
		t.Fatalf("restart: %d %s", code, body)
	}
	if _, lines := runCode(t, srv.URL, `{"code":"x"}`); lines[0]["type"] != "error" {
		t.Errorf("x after a restart: %v", lines)
	}
}

// TestContextsWithoutSessions: a Manager without named sessions lists the
// default context and refuses to create one with 501.
func TestContextsWithoutSessions(t *testing.T) {
	m, id := interpFakeSandbox(t)
	srv := envdTestServer(t, m, id, 49999)
	m.Fail("CreateContext", sandbox.ErrNotSupported)
	m.Fail("Contexts", sandbox.ErrNotSupported)
	if code, body := interpDo(t, srv.URL, "GET", "/contexts", ""); code != 200 || !strings.Contains(body, `"id":"default"`) {
		t.Errorf("list: %d %s", code, body)
	}
	if code, body := interpDo(t, srv.URL, "POST", "/contexts", `{"language":"js"}`); code != 501 {
		t.Errorf("create: %d %s", code, body)
	}
	if code, body := interpDo(t, srv.URL, "POST", "/contexts/e2b-js-0123456789ab/restart", ""); code != 404 {
		t.Errorf("restart: %d %s", code, body)
	}
}
