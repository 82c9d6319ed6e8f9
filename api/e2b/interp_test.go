package e2b

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// envdTestServer serves one sandbox's port (49999: the interpreter, 49983:
// envd) of m over HTTP, as the router does once the caller is known.
func envdTestServer(t *testing.T, m sandbox.Manager, id string, port int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := scope{m: m, id: id, port: port, log: slog.New(slog.DiscardHandler)}
		if port == 49999 {
			serveInterp(s, w, r)
		} else {
			serveEnvd(s, w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func interpFakeSandbox(t *testing.T) (*sandboxtest.Manager, string) {
	t.Helper()
	m := sandboxtest.New()
	info, err := m.Create(context.Background(), sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return m, info.ID
}

// runCode posts what the SDK's runCode posts and returns the NDJSON lines.
func runCode(t *testing.T, url, body string) (int, []map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/execute", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, []map[string]any{{"body": string(b)}}
	}
	var lines []map[string]any
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		lines = append(lines, v)
	}
	return 200, lines
}

func interpTypes(lines []map[string]any) string {
	var ts []string
	for _, l := range lines {
		ts = append(ts, l["type"].(string))
	}
	return strings.Join(ts, ",")
}

func TestExecuteStreamsWhatTheSDKParses(t *testing.T) {
	m, id := interpFakeSandbox(t)
	srv := envdTestServer(t, m, id, 49999)

	// {"code":...} as runCode sends it without options (undefined keys
	// are left out by JSON.stringify).
	code, lines := runCode(t, srv.URL, `{"code":"stream"}`)
	if code != 200 {
		t.Fatalf("status %d: %v", code, lines)
	}
	if got, want := interpTypes(lines), "stdout,stderr,stdout,result,number_of_executions,end_of_execution"; got != want {
		t.Fatalf("types %s, want %s", got, want)
	}
	if lines[0]["text"] != "out 1\n" || lines[1]["text"] != "err 1\n" {
		t.Errorf("stream texts: %v %v", lines[0], lines[1])
	}
	if lines[3]["text"] != "3" || lines[3]["is_main_result"] != true {
		t.Errorf("result: %v", lines[3])
	}
	if lines[4]["execution_count"] != float64(1) {
		t.Errorf("number_of_executions: %v", lines[4])
	}

	// State lives across cells: the default context is the interpreter.
	runCode(t, srv.URL, `{"code":"x = 41","context_id":"default","language":"python"}`)
	_, lines = runCode(t, srv.URL, `{"code":"x"}`)
	if lines[0]["type"] != "result" || lines[0]["text"] != "41" {
		t.Fatalf("x: %v", lines)
	}
}

func TestExecuteErrorAndRichResults(t *testing.T) {
	m, id := interpFakeSandbox(t)
	srv := envdTestServer(t, m, id, 49999)

	_, lines := runCode(t, srv.URL, `{"code":"raise"}`)
	if got := interpTypes(lines); got != "error,number_of_executions,end_of_execution" {
		t.Fatalf("raise: %s", got)
	}
	e := lines[0]
	if e["name"] != "KeyError" || e["value"] != "'x'" || !strings.Contains(e["traceback"].(string), "Traceback (most recent call last):\n") {
		t.Errorf("error line: %v", e)
	}

	// A timeout has no error event of its own: the end carries it.
	_, lines = runCode(t, srv.URL, `{"code":"timeout"}`)
	if got := interpTypes(lines); got != "stdout,error,number_of_executions,end_of_execution" || lines[1]["name"] != "TimeoutError" {
		t.Fatalf("timeout: %v", lines)
	}

	_, lines = runCode(t, srv.URL, `{"code":"chart"}`)
	if got := interpTypes(lines); got != "result,result,number_of_executions,end_of_execution" {
		t.Fatalf("chart: %s", got)
	}
	fig, main := lines[0], lines[1]
	png, err := base64.StdEncoding.DecodeString(fig["png"].(string))
	if err != nil || !strings.HasPrefix(string(png), "\x89PNG") || fig["is_main_result"] != false {
		t.Errorf("figure: png %v decodes %v", fig["is_main_result"], err)
	}
	if main["html"] != "<b>done</b>" || main["markdown"] != "**done**" || main["svg"] == nil || main["text"] != "'done'" {
		t.Errorf("main: %v", main)
	}
	if j, ok := main["json"].(map[string]any); !ok || j["a"] == nil {
		t.Errorf("json is sent as the object: %#v", main["json"])
	}
}

func TestExecuteRefusals(t *testing.T) {
	m, id := interpFakeSandbox(t)
	srv := envdTestServer(t, m, id, 49999)
	for _, c := range []struct {
		body string
		code int
		says string
	}{
		{`{"code":"1","language":"cobol"}`, 400, "javascript (js)"},
		{`{"code":"1","context_id":"default","language":"js"}`, 400, "not both"},
		{`{"code":"1","context_id":"ctx-2"}`, 404, "not found"},
		{`{"code":"1","env_vars":{"A":"b"}}`, 400, "env_vars"},
		{`{"code":`, 400, "JSON"},
		{`{"code":"internal"}`, 500, "internal error"},
	} {
		code, lines := runCode(t, srv.URL, c.body)
		if code != c.code || !strings.Contains(lines[0]["body"].(string), c.says) {
			t.Errorf("%s: %d %v, want %d saying %q", c.body, code, lines, c.code, c.says)
		}
	}
	big := `{"code":"` + strings.Repeat("a", interpMaxBody) + `"}`
	if code, _ := runCode(t, srv.URL, big); code != 400 {
		t.Errorf("an oversized body: %d", code)
	}
	if err := m.Delete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if code, _ := runCode(t, srv.URL, `{"code":"1"}`); code != 404 {
		t.Errorf("a deleted sandbox: %d", code)
	}
}

func TestExecuteClientGoneInterrupts(t *testing.T) {
	m, id := interpFakeSandbox(t)
	srv := envdTestServer(t, m, id, 49999)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/execute", strings.NewReader(`{"code":"gate"}`))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(res.Body).ReadString('\n')
	if !strings.Contains(line, "waiting") {
		t.Fatalf("first line %q", line)
	}
	cancel() // the SDK's timeoutMs passed
	res.Body.Close()
	// The sandbox is free again and its variables are there.
	for range 100 {
		info, _ := m.Get(context.Background(), id)
		if !info.CellRunning {
			return
		}
		waitABit()
	}
	t.Fatal("the cell still runs after the client went away")
}

func waitABit() { time.Sleep(20 * time.Millisecond) }
