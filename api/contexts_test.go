package api

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// TestCellLanguages: a cell's language and context reach the manager
// (aliases read), each session keeps its own variables, an unknown
// language is 400 naming the languages, a bad context name is 400, and a
// language the sandbox's image lacks is 400 naming those it has; none of
// the refused cells reaches the manager.
func TestCellLanguages(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	post := func(body string) (int, []byte) {
		status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/cells", jsonBody(body))
		return status, b
	}
	for _, body := range []string{`{"code": "x = 1"}`, `{"code": "let x = 41", "language": "js"}`, `{"code": "x = 7", "language": "JavaScript", "context": "w"}`} {
		if status, b := post(body); status != http.StatusOK {
			t.Fatalf("%s: %d %s", body, status, b)
		}
	}
	for body, want := range map[string]string{
		`{"code": "x"}`:                   "1",
		`{"code": "x", "language": "ts"}`: "41",
		`{"code": "x", "language": "javascript", "context": "w"}`: "7",
	} {
		status, b := post(body)
		var res cell.Result
		if err := json.Unmarshal(b, &res); status != http.StatusOK || err != nil || res.MainResult() == nil || res.MainResult().Data[cell.MIMEText] != want {
			t.Errorf("%s: %d %s, want x = %s", body, status, b, want)
		}
	}
	calls := e.fake.Calls()
	for _, want := range []string{`RunCell ` + id + ` "let x = 41" javascript/default`, `RunCell ` + id + ` "x = 7" javascript/w`, `RunCell ` + id + ` "x" typescript/default`} {
		if !slices.Contains(calls, want) {
			t.Errorf("the manager was not called with %s: %q", want, calls)
		}
	}

	before := len(e.fake.Calls())
	status, b := post(`{"code": "1", "language": "cobol"}`)
	if apiErr := wantAPIError(t, "cobol", status, b, http.StatusBadRequest, CodeInvalid); apiErr != nil &&
		!strings.Contains(apiErr.Message, "python, javascript (js), typescript (ts), bash") {
		t.Errorf("cobol's message does not name the languages: %q", apiErr.Message)
	}
	status, b = post(`{"code": "1", "context": "../x"}`)
	wantAPIError(t, "a bad context name", status, b, http.StatusBadRequest, CodeInvalid)
	if n := len(e.fake.Calls()); n != before {
		t.Errorf("refused cells reached the manager: %q", e.fake.Calls()[before:])
	}

	slim, err := e.client.Create(context.Background(), sandbox.Config{Image: "scratch"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.client.RunCell(context.Background(), slim.ID, sandbox.Cell{Session: sandbox.Session{Language: cell.TypeScript}, Code: "1", Timeout: time.Second}, nil)
	if apiErr := wantClientError(t, "typescript on scratch", err, http.StatusBadRequest, CodeInvalid); !strings.Contains(apiErr.Message, "its languages are python, bash") {
		t.Errorf("the refusal does not name the image's languages: %q", apiErr.Message)
	}
	res, err := e.client.RunCell(context.Background(), slim.ID, sandbox.Cell{Session: sandbox.Session{Language: cell.Bash}, Code: "export V=7\necho $V", Timeout: time.Second}, nil)
	if err != nil || res.Stdout != "7\n" {
		t.Errorf("bash on scratch: %+v, %v", res, err)
	}
}

// TestRestartSession: the restart body names the session (none: Python's
// default one), which alone loses its variables; a bad body is 400.
func TestRestartSession(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ctx := context.Background()
	js := sandbox.Session{Language: cell.JavaScript}
	for _, c := range []sandbox.Cell{{Code: "x = 1"}, {Session: js, Code: "x = 2"}} {
		c.Timeout = time.Second
		if _, err := e.client.RunCell(ctx, id, c, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.client.Restart(ctx, id, sandbox.Session{Language: "js"}); err != nil {
		t.Fatal(err)
	}
	if res, _ := e.client.RunCell(ctx, id, sandbox.Cell{Session: js, Code: "x", Timeout: time.Second}, nil); res.Status != cell.StatusError {
		t.Errorf("javascript's x after its restart: %+v", res)
	}
	if res, _ := e.client.RunCell(ctx, id, sandbox.Cell{Code: "x", Timeout: time.Second}, nil); res.Status != cell.StatusOK {
		t.Errorf("python's x after javascript's restart: %+v", res)
	}
	status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/restart", nil)
	if status != http.StatusNoContent {
		t.Fatalf("restart with no body: %d %s", status, b)
	}
	if res, _ := e.client.RunCell(ctx, id, sandbox.Cell{Code: "x", Timeout: time.Second}, nil); res.Status != cell.StatusError {
		t.Errorf("python's x after a restart with no body: %+v", res)
	}
	for _, body := range []string{`{"language": "cobol"}`, `{"context": "a/b"}`, `{"lang": "js"}`} {
		status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/restart", jsonBody(body))
		wantAPIError(t, "restart "+body, status, b, http.StatusBadRequest, CodeInvalid)
	}
	if err := e.client.Restart(ctx, id, sandbox.Session{Language: cell.Bash, Context: "nope"}); err != nil {
		wantClientError(t, "restart of a context that does not exist", err, http.StatusNotFound, CodeNotFound)
	} else {
		t.Error("restart of a context that does not exist passed")
	}
}

// TestContextsRoutes: create (201), list, delete (204) through the
// client; a name in use and a bad spec are 400, the limit 429, a default
// session's delete 400, another's sandbox 404.
func TestContextsRoutes(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ctx := context.Background()
	ci, err := e.client.CreateContext(ctx, id, sandbox.ContextSpec{Language: "ts", Name: "work", Cwd: "/home/user"})
	if err != nil || ci != (sandbox.ContextInfo{Language: cell.JavaScript, Name: "work", Cwd: "/home/user"}) {
		t.Fatalf("CreateContext = %+v, %v", ci, err)
	}
	status, hdr, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/contexts", nil)
	var made sandbox.ContextInfo
	if status != http.StatusCreated || json.Unmarshal(b, &made) != nil || made.Language != cell.Python || made.Name == "" {
		t.Errorf("create with no body: %d %s %v", status, b, hdr)
	}
	if _, err := e.client.RunCell(ctx, id, sandbox.Cell{Session: sandbox.Session{Language: cell.JavaScript, Context: "work"}, Code: "x = 1", Timeout: time.Second}, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := e.client.Contexts(ctx, id)
	want := []sandbox.ContextInfo{{Language: cell.Python, Name: made.Name}, {Language: cell.JavaScript, Name: "work", Cwd: "/home/user", Running: true}}
	if err != nil || !slices.Equal(cs, want) {
		t.Errorf("Contexts = %+v, %v; want %+v", cs, err, want)
	}
	for body, code := range map[string]string{
		`{"language": "js", "name": "work"}`: CodeInvalid,
		`{"name": "default"}`:                CodeInvalid,
		`{"language": "cobol"}`:              CodeInvalid,
		`{"cwd": "relative"}`:                CodeInvalid,
		`{"name": "x", "extra": 1}`:          CodeInvalid,
	} {
		status, _, b := e.do(t, "POST", "/v1/sandboxes/"+id+"/contexts", jsonBody(body))
		wantAPIError(t, "create "+body, status, b, http.StatusBadRequest, code)
	}
	for i := len(cs); i < cell.MaxContexts; i++ {
		if _, err := e.client.CreateContext(ctx, id, sandbox.ContextSpec{Language: cell.Bash}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = e.client.CreateContext(ctx, id, sandbox.ContextSpec{Language: cell.Bash})
	wantClientError(t, "a context past the limit", err, http.StatusTooManyRequests, CodeQuota)

	if err := e.client.DeleteContext(ctx, id, sandbox.Session{Language: "js", Context: "work"}); err != nil {
		t.Fatalf("DeleteContext: %v", err)
	}
	err = e.client.DeleteContext(ctx, id, sandbox.Session{Language: "js", Context: "work"})
	wantClientError(t, "deleting it again", err, http.StatusNotFound, CodeNotFound)
	err = e.client.DeleteContext(ctx, id, sandbox.Session{})
	wantClientError(t, "deleting python's default session", err, http.StatusBadRequest, CodeInvalid)
	status, _, b = e.do(t, "DELETE", "/v1/sandboxes/"+id+"/contexts/"+made.Name+"?language=cobol", nil)
	wantAPIError(t, "delete with language cobol", status, b, http.StatusBadRequest, CodeInvalid)
	status, _, b = e.do(t, "DELETE", "/v1/sandboxes/"+id+"/contexts/"+made.Name, nil)
	if status != http.StatusNoContent {
		t.Errorf("delete python's %s: %d %s", made.Name, status, b)
	}
	_, err = e.client.Contexts(ctx, "sb-nosuch")
	wantClientError(t, "contexts of no sandbox", err, http.StatusNotFound, CodeNotFound)
}
