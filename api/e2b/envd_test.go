package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// The requests below are what @connectrpc/connect-web sends for the
// e2b SDK (useBinaryFormat false): unary calls as application/json,
// server streams as application/connect+json envelopes, messages in
// proto3 JSON with the fields' camelCase names.

const basicUser = "Basic dXNlcjo=" // "user:", as authenticationHeader builds it
const basicRoot = "Basic cm9vdDo=" // "root:"

func envdUnary(t *testing.T, url, method, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/"+method, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s answered %d %q: not JSON", method, res.StatusCode, b)
	}
	return res.StatusCode, out
}

// stream opens a server stream; next returns each message, then the
// end-of-stream message (with end true).
type envdStreamReader struct {
	t    *testing.T
	body io.ReadCloser
}

func envdOpenStream(t *testing.T, ctx context.Context, url, method, body string, hdr map[string]string) *envdStreamReader {
	t.Helper()
	var env bytes.Buffer
	env.WriteByte(0)
	binary.Write(&env, binary.BigEndian, uint32(len(body)))
	env.WriteString(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/"+method, &env)
	req.Header.Set("Content-Type", "application/connect+json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("%s: %d %s", method, res.StatusCode, res.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { res.Body.Close() })
	return &envdStreamReader{t: t, body: res.Body}
}

func (s *envdStreamReader) next() (msg map[string]any, end bool) {
	s.t.Helper()
	var hdr [5]byte
	if _, err := io.ReadFull(s.body, hdr[:]); err != nil {
		s.t.Fatalf("reading an envelope: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
	if _, err := io.ReadFull(s.body, b); err != nil {
		s.t.Fatal(err)
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		s.t.Fatalf("envelope %q: %v", b, err)
	}
	return msg, hdr[0] == 2
}

// all reads to the end and returns the messages as JSON lines and the
// end message.
func (s *envdStreamReader) all() ([]string, map[string]any) {
	var msgs []string
	for {
		m, end := s.next()
		if end {
			return msgs, m
		}
		b, _ := json.Marshal(m)
		msgs = append(msgs, string(b))
	}
}

func TestEnvdStartRunsACommand(t *testing.T) {
	f := newEnvdFake()
	info, _ := f.Create(context.Background(), sandbox.Config{})
	srv := envdTestServer(t, f, info.ID, 49983)

	// commands.run("echo hi", {cwd: "work", envs: {A: "1"}}) with the
	// default timeoutMs.
	st := envdOpenStream(t, context.Background(), srv.URL, "process.Process/Start",
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"1"},"cwd":"work"},"stdin":false}`,
		map[string]string{"Authorization": basicUser, "Keepalive-Ping-Interval": "50", "Connect-Timeout-Ms": "60000"})
	msgs, end := st.all()
	want := []string{
		`{"event":{"start":{"pid":7}}}`,
		`{"event":{"data":{"stdout":"aGkK"}}}`,
		`{"event":{"data":{"stderr":"d2Fybgo="}}}`,
		`{"event":{"end":{"exitCode":0,"exited":true,"status":"exit status 0"}}}`,
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") || len(end) != 0 {
		t.Fatalf("stream:\n%s\nend %v", strings.Join(msgs, "\n"), end)
	}
	r := f.reqs[0]
	if strings.Join(r.Argv, "|") != "/bin/bash|-l|-c|echo hi" || r.Cwd != "/home/user/work" || r.User != "user" ||
		r.Env["A"] != "1" || r.Stdin || r.Timeout != time.Minute || r.PTY != nil {
		t.Errorf("request: %+v", r)
	}

	// A failing command: its exit code and the error CommandExitError shows.
	msgs, _ = envdOpenStream(t, context.Background(), srv.URL, "process.Process/Start",
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","exit 2"]}}`, nil).all()
	if msgs[len(msgs)-1] != `{"event":{"end":{"error":"exit status 2","exitCode":2,"exited":true,"status":"exit status 2"}}}` {
		t.Errorf("exit 2: %v", msgs)
	}
	if !f.reqs[1].Stdin {
		t.Error("stdin left out is envd's default, true")
	}

	// A program that never started is an error the SDK raises.
	msgs, end = envdOpenStream(t, context.Background(), srv.URL, "process.Process/Start",
		`{"process":{"cmd":"nosuch"}}`, nil).all()
	if len(msgs) != 0 || end["error"].(map[string]any)["code"] != "invalid_argument" ||
		!strings.Contains(end["error"].(map[string]any)["message"].(string), "no such program") {
		t.Errorf("nosuch: %v %v", msgs, end)
	}

	// A PTY: pty.create's request.
	envdOpenStream(t, context.Background(), srv.URL, "process.Process/Start",
		`{"process":{"cmd":"/bin/bash","args":["-i","-l","-c","echo hi"],"envs":{"TERM":"xterm-256color"}},"pty":{"size":{"cols":80,"rows":24}}}`,
		map[string]string{"Authorization": basicRoot}).all()
	if r := f.reqs[3]; r.PTY == nil || *r.PTY != (sandbox.PTYSize{Cols: 80, Rows: 24}) || r.User != "root" || r.Stdin {
		t.Errorf("pty request: %+v", r)
	}
}

func TestEnvdBackgroundProcess(t *testing.T) {
	f := newEnvdFake()
	info, _ := f.Create(context.Background(), sandbox.Config{})
	srv := envdTestServer(t, f, info.ID, 49983)

	// commands.run("sleep", {background: true}) then disconnect().
	ctx, cancel := context.WithCancel(context.Background())
	st := envdOpenStream(t, ctx, srv.URL, "process.Process/Start",
		`{"process":{"cmd":"/bin/bash","args":["-l","-c","sleep"]},"tag":"napper","stdin":true}`, nil)
	if m, _ := st.next(); m["event"].(map[string]any)["start"] == nil {
		t.Fatalf("first event %v", m)
	}
	cancel()

	code, list := envdUnary(t, srv.URL, "process.Process/List", `{}`, nil)
	ps, _ := list["processes"].([]any)
	if code != 200 || len(ps) != 1 {
		t.Fatalf("list: %d %v", code, list)
	}
	p := ps[0].(map[string]any)
	if p["pid"] != float64(8) || p["tag"] != "napper" || p["config"].(map[string]any)["cmd"] != "/bin/bash" {
		t.Errorf("list entry %v", p)
	}

	// commands.connect by tag, with pings every second.
	att := envdOpenStream(t, context.Background(), srv.URL, "process.Process/Connect",
		`{"process":{"tag":"napper"}}`, map[string]string{"Keepalive-Ping-Interval": "1"})
	if m, _ := att.next(); m["event"].(map[string]any)["start"].(map[string]any)["pid"] != float64(8) {
		t.Fatalf("connect's first event %v", m)
	}
	if m, _ := att.next(); m["event"].(map[string]any)["data"].(map[string]any)["stdout"] != "YmFja2xvZwo=" {
		t.Fatalf("connect's backlog %v", m)
	}
	if m, _ := att.next(); m["event"].(map[string]any)["keepalive"] == nil {
		t.Fatalf("expected a keepalive, got %v", m)
	}

	if code, out := envdUnary(t, srv.URL, "process.Process/SendInput", `{"process":{"pid":8},"input":{"stdin":"aGkK"}}`, nil); code != 200 || len(out) != 0 {
		t.Errorf("sendStdin: %d %v", code, out)
	}
	if code, _ := envdUnary(t, srv.URL, "process.Process/CloseStdin", `{"process":{"pid":8}}`, nil); code != 200 {
		t.Errorf("closeStdin: %d", code)
	}
	if code, _ := envdUnary(t, srv.URL, "process.Process/Update", `{"process":{"pid":8},"pty":{"size":{"cols":100,"rows":30}}}`, nil); code != 200 {
		t.Errorf("resize: %d", code)
	}
	// kill(): protobuf-es writes the enum by name.
	if code, out := envdUnary(t, srv.URL, "process.Process/SendSignal", `{"process":{"pid":8},"signal":"SIGNAL_SIGKILL"}`, nil); code != 200 {
		t.Fatalf("kill: %d %v", code, out)
	}
	var last string
	for {
		m, end := att.next()
		if end {
			if len(m) != 0 {
				t.Errorf("end of the connect stream: %v", m)
			}
			break
		}
		b, _ := json.Marshal(m)
		last = string(b)
	}
	if last != `{"event":{"end":{"error":"signal: killed","exitCode":-1,"exited":false,"status":"signal: killed"}}}` {
		t.Errorf("end after the kill: %s", last)
	}
	if strings.Join(f.inputs, ";") != `"hi\n" eof=false;"" eof=true` || f.signals[0] != sandbox.SignalKill ||
		f.resized[0] != (sandbox.PTYSize{Cols: 100, Rows: 30}) {
		t.Errorf("inputs %v signals %v resized %v", f.inputs, f.signals, f.resized)
	}

	// The pid is gone now: kill() reads not_found as false.
	if code, out := envdUnary(t, srv.URL, "process.Process/SendSignal", `{"process":{"pid":8},"signal":9}`, nil); code != 404 || out["code"] != "not_found" {
		t.Errorf("kill again: %d %v", code, out)
	}
	if _, end := envdOpenStream(t, context.Background(), srv.URL, "process.Process/Connect", `{"process":{"tag":"nobody"}}`, nil).all(); end["error"].(map[string]any)["code"] != "not_found" {
		t.Errorf("connect to no tag: %v", end)
	}
}

func TestEnvdConnectRefusesMalformedCalls(t *testing.T) {
	f := newEnvdFake()
	info, _ := f.Create(context.Background(), sandbox.Config{})
	srv := envdTestServer(t, f, info.ID, 49983)

	for _, c := range []struct{ method, body, code string }{
		{"process.Process/List", `{`, "invalid_argument"},
		{"process.Process/SendSignal", `{"process":{"pid":8},"signal":"SIGNAL_SIGSTOP"}`, "invalid_argument"},
		{"process.Process/SendInput", `{"input":{"stdin":"aGk="}}`, "invalid_argument"},
		{"process.Process/SendInput", `{"process":{"pid":1},"input":{"stdin":"not base64!"}}`, "invalid_argument"},
		{"process.Process/Nope", `{}`, "unimplemented"},
		{"process.Process/StreamInput", `{}`, "unimplemented"},
		{"filesystem.Filesystem/CreateWatcher", `{}`, "unimplemented"},
		{"filesystem.Filesystem/Stat", `{"path":"/home/user/secret"}`, "permission_denied"},
	} {
		code, out := envdUnary(t, srv.URL, c.method, c.body, nil)
		if out["code"] != c.code || code < 400 {
			t.Errorf("%s %s: %d %v, want %s", c.method, c.body, code, out, c.code)
		}
	}
	// A user the sandbox does not have.
	if _, out := envdUnary(t, srv.URL, "filesystem.Filesystem/Stat", `{"path":"a.txt"}`, map[string]string{"Authorization": "Basic Ym9iOg=="}); out["code"] != "invalid_argument" {
		t.Errorf("user bob: %v", out)
	}
	// The binary protocol is not spoken.
	req, _ := http.NewRequest("POST", srv.URL+"/process.Process/List", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/proto")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("application/proto: %v %v", res.StatusCode, err)
	}
	// A stream whose body is no envelope ends with invalid_argument.
	req, _ = http.NewRequest("POST", srv.URL+"/process.Process/Start", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/connect+json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, end := (&envdStreamReader{t: t, body: res.Body}).all()
	if end["error"].(map[string]any)["code"] != "invalid_argument" {
		t.Errorf("no envelope: %v", end)
	}
	if len(f.reqs) != 0 {
		t.Errorf("a malformed call started a process: %v", f.reqs)
	}
}

func TestEnvdFilesystem(t *testing.T) {
	f := newEnvdFake()
	info, _ := f.Create(context.Background(), sandbox.Config{})
	srv := envdTestServer(t, f, info.ID, 49983)

	code, out := envdUnary(t, srv.URL, "filesystem.Filesystem/Stat", `{"path":"a.txt"}`, nil)
	b, _ := json.Marshal(out)
	if code != 200 || string(b) != `{"entry":{"group":"user","mode":420,"modifiedTime":"2024-05-06T07:08:09.000000500Z","name":"a.txt","owner":"user","path":"/home/user/a.txt","permissions":"-rw-r--r--","size":"5","type":"FILE_TYPE_FILE"}}` {
		t.Errorf("stat: %d %s", code, b)
	}
	if code, out := envdUnary(t, srv.URL, "filesystem.Filesystem/Stat", `{"path":"/nope"}`, nil); code != 404 || out["code"] != "not_found" {
		t.Errorf("exists(/nope): %d %v", code, out)
	}
	code, out = envdUnary(t, srv.URL, "filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":1}`, map[string]string{"Authorization": basicRoot})
	es := out["entries"].([]any)
	if code != 200 || len(es) != 3 || es[1].(map[string]any)["type"] != "FILE_TYPE_SYMLINK" || es[1].(map[string]any)["symlinkTarget"] != "a.txt" ||
		es[2].(map[string]any)["type"] != "FILE_TYPE_UNSPECIFIED" || es[0].(map[string]any)["permissions"] != "-rw-r--r--" {
		t.Errorf("list: %d %v", code, out)
	}
	if last := f.files[len(f.files)-1]; last.User != "root" || last.Depth != 1 {
		t.Errorf("list's request %+v", last)
	}
	if code, out := envdUnary(t, srv.URL, "filesystem.Filesystem/ListDir", `{"path":"/home/user","depth":99}`, nil); code != 400 {
		t.Errorf("depth 99: %d %v", code, out)
	}
	if code, out := envdUnary(t, srv.URL, "filesystem.Filesystem/MakeDir", `{"path":"new"}`, nil); code != 200 || out["entry"].(map[string]any)["type"] != "FILE_TYPE_DIRECTORY" {
		t.Errorf("makeDir new: %d %v", code, out)
	}
	if code, out := envdUnary(t, srv.URL, "filesystem.Filesystem/MakeDir", `{"path":"/home/user/dir"}`, nil); code != 409 || out["code"] != "already_exists" {
		t.Errorf("makeDir exists: %d %v", code, out)
	}
	if code, out := envdUnary(t, srv.URL, "filesystem.Filesystem/Move", `{"source":"a.txt","destination":"/tmp/b.txt"}`, nil); code != 200 || out["entry"].(map[string]any)["path"] != "/tmp/b.txt" {
		t.Errorf("rename: %d %v", code, out)
	}
	if code, _ := envdUnary(t, srv.URL, "filesystem.Filesystem/Remove", `{"path":"~/a.txt"}`, nil); code != 200 || f.files[len(f.files)-1].Path != "/home/user/a.txt" {
		t.Errorf("remove: %d %+v", code, f.files[len(f.files)-1])
	}

	// watchDir with includeEntry: the start, then the changes.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := envdOpenStream(t, ctx, srv.URL, "filesystem.Filesystem/WatchDir", `{"path":"/home/user","recursive":true,"includeEntry":true}`,
		map[string]string{"Keepalive-Ping-Interval": "50"})
	var got []string
	for range 3 {
		m, end := st.next()
		if end {
			t.Fatalf("the watch ended: %v", m)
		}
		b, _ := json.Marshal(m)
		got = append(got, string(b))
	}
	if got[0] != `{"start":{}}` || !strings.HasPrefix(got[1], `{"filesystem":{"entry":{`) || !strings.Contains(got[1], `"type":"EVENT_TYPE_CREATE"`) ||
		got[2] != `{"filesystem":{"name":"gone","type":"EVENT_TYPE_REMOVE"}}` {
		t.Errorf("watch:\n%s", strings.Join(got, "\n"))
	}
	if w := f.files[len(f.files)-2]; w.Path != "/home/user" || !w.Recursive {
		t.Errorf("the watch's request: %+v", w)
	}
}

func TestEnvdFilesRoundTrip(t *testing.T) {
	f := newEnvdFake()
	info, _ := f.Create(context.Background(), sandbox.Config{})
	srv := envdTestServer(t, f, info.ID, 49983)

	// writeFiles([{path:"a.txt"},{path:"/tmp/b.bin"}]): one "file" part each.
	var body bytes.Buffer
	mw := newMultipart(&body, map[string]string{"a.txt": "hello", "/tmp/b.bin": "\x00\x01"})
	res, err := http.Post(srv.URL+"/files", mw, &body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(b), `{"name":"a.txt","type":"file","path":"/home/user/a.txt"}`) ||
		!strings.Contains(string(b), `"path":"/tmp/b.bin"`) {
		t.Fatalf("write: %d %s", res.StatusCode, b)
	}
	get := func(q string) (int, string) {
		res, err := http.Get(srv.URL + "/files?" + q)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, got := get("path=a.txt&username=user"); code != 200 || got != "hello" {
		t.Errorf("read a.txt: %d %q", code, got)
	}
	if code, got := get("path=%2Ftmp%2Fb.bin"); code != 200 || got != "\x00\x01" {
		t.Errorf("read b.bin: %d %q", code, got)
	}
	if code, got := get("path=/nope"); code != 404 || !strings.Contains(got, `"code":404`) {
		t.Errorf("read /nope: %d %s", code, got)
	}
	if code, got := get("path=/etc/x&username=root"); code != 403 {
		t.Errorf("root in a sandbox without Root: %d %s", code, got)
	}
	if code, _ := get("path=/etc/x&username=bob"); code != 400 {
		t.Errorf("bob: %d", code)
	}
	if code, _ := get("path=../../etc/passwd"); code != 400 {
		t.Errorf("a path with ..: %d", code)
	}

	// An octet-stream upload, gzip, as newer SDKs send with gzip: true.
	var gz bytes.Buffer
	zw := newGzip(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/files?path=z.txt", &gz)
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Content-Encoding", "gzip")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("gzip upload: %v %v", res.StatusCode, err)
	}
	if code, got := get("path=z.txt"); code != 200 || got != "zipped" {
		t.Errorf("read z.txt: %d %q", code, got)
	}

	// Past the manager's cap: 413.
	f.Fail("Upload", sandbox.ErrTooLarge)
	req, _ = http.NewRequest("POST", srv.URL+"/files?path=big", strings.NewReader("x"))
	req.Header.Set("Content-Type", "application/octet-stream")
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 413 {
		t.Errorf("too large: %v %v", res.StatusCode, err)
	}
	if res, err := http.Get(srv.URL + "/health"); err != nil || res.StatusCode != 204 {
		t.Errorf("health: %v %v", res.StatusCode, err)
	}
}

func newMultipart(w io.Writer, files map[string]string) string {
	mw := multipart.NewWriter(w)
	for p, data := range files {
		fw, _ := mw.CreateFormFile("file", p)
		fw.Write([]byte(data))
	}
	mw.Close()
	return mw.FormDataContentType()
}

func newGzip(w io.Writer) *gzip.Writer { return gzip.NewWriter(w) }
