package api

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

func TestExec(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ctx := context.Background()
	// The fake's commands show what reached the manager: argv prints its
	// argv as JSON, writes "to stderr" and exits 3; cat prints its stdin,
	// hex its stdin in hex; sleep times out after the timeout it got.
	res, err := e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"argv", "-l", "/workspace"}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if res.ExitCode != 3 || res.Stdout != `["argv","-l","/workspace"]` || res.Stderr != "to stderr\n" {
		t.Errorf("result %+v", res)
	}
	if res, err := e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("in"), Timeout: 2 * time.Second}); err != nil || res.Stdout != "in" {
		t.Errorf("stdin: %+v, %v", res, err)
	}
	if res, err := e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"sleep", "9"}, Timeout: 2 * time.Second}); err != nil || !res.TimedOut || res.DurationMS != 2000 {
		t.Errorf("timeout: %+v, %v", res, err)
	}
	// Binary stdin goes as base64 and arrives intact; no timeout is the
	// default.
	bin := []byte{0xff, 0x00, 0xfe, 'a'}
	if res, err := e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"hex"}, Stdin: bin}); err != nil || res.Stdout != hex.EncodeToString(bin) {
		t.Errorf("binary stdin: %+v, %v", res, err)
	}
	if res, err := e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"sleep", "9"}}); err != nil || res.DurationMS != DefaultCellTimeout.Milliseconds() {
		t.Errorf("default timeout: %+v, %v", res, err)
	}

	for name, req := range map[string]sandbox.ExecRequest{
		"empty argv":       {},
		"empty program":    {Argv: []string{""}},
		"NUL in argument":  {Argv: []string{"echo", "a\x00b"}},
		"negative timeout": {Argv: []string{"true"}, Timeout: -time.Millisecond},
	} {
		_, err := e.client.Exec(ctx, id, req)
		wantClientError(t, name, err, http.StatusBadRequest, CodeInvalid)
	}
	_, err = e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: bytes.Repeat([]byte("x"), sandbox.MaxStdinBytes+1)})
	wantClientError(t, "stdin over 1 MiB", err, http.StatusRequestEntityTooLarge, CodeTooLarge)
	status, _, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/exec", jsonBody(`{"argv": ["true"], "timeout_ms": 0}`))
	wantAPIError(t, "timeout_ms 0", status, body, http.StatusBadRequest, CodeInvalid)
}

func TestFilesRoundTrip(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ctx := context.Background()
	data := bytes.Repeat([]byte("col1,col2\n1,2\n"), 50000)
	for _, p := range []string{"/workspace/dir/data.csv", "workspace/with space/ü%41#?.txt"} {
		// An io.Reader of unknown size is sent chunked.
		n, err := e.client.Upload(ctx, id, p, io.MultiReader(bytes.NewReader(data)))
		if err != nil || n != int64(len(data)) {
			t.Fatalf("Upload %s: %d, %v", p, n, err)
		}
		var out bytes.Buffer
		n, err = e.client.Download(ctx, id, p, &out)
		if err != nil || n != int64(len(data)) || !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("Download %s: %d bytes, %v", p, n, err)
		}
	}
	calls := e.fake.Calls()
	for _, want := range []string{"Upload " + id + " /workspace/dir/data.csv", "Upload " + id + " /workspace/with space/ü%41#?.txt"} {
		if !slices.Contains(calls, want) {
			t.Errorf("manager never saw %q; calls %q", want, calls)
		}
	}
	_, err := e.client.Download(ctx, id, "/workspace/missing", io.Discard)
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
	// The raw body is the file, not JSON.
	status, hdr, body := e.do(t, "GET", "/v1/sandboxes/"+id+"/files/workspace/dir/data.csv", nil)
	if status != 200 || hdr.Get("Content-Type") != "application/octet-stream" || !bytes.Equal(body, data) {
		t.Errorf("raw download: %d %q, %d bytes", status, hdr.Get("Content-Type"), len(body))
	}
	// An empty file is fine both ways.
	if n, err := e.client.Upload(ctx, id, "/tmp/empty", strings.NewReader("")); err != nil || n != 0 {
		t.Errorf("empty upload: %d, %v", n, err)
	}
	var out bytes.Buffer
	if n, err := e.client.Download(ctx, id, "/tmp/empty", &out); err != nil || n != 0 {
		t.Errorf("empty download: %d, %v", n, err)
	}
}

func TestFilePathTraversalRefused(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	base := "/v1/sandboxes/" + id + "/files/"
	cases := []string{
		"workspace/../etc/passwd",
		"../../etc/passwd",
		"workspace/%2e%2e/etc/passwd",
		"%2E%2E/%2e%2e/etc/shadow",
		"workspace%2F..%2F..%2Fetc%2Fpasswd",
		"workspace/a%00b",
		"workspace//x",
		"workspace/./x",
		"proc/self/mem",
		"sys/kernel/notes",
		"dev/kvm",
		"proc",
		"",
		strings.Repeat("a/", 2100),
	}
	for _, p := range cases {
		for _, method := range []string{"PUT", "GET"} {
			status, body := e.doRawPath(t, method, base+p, strings.NewReader("x"))
			wantAPIError(t, method+" "+clipString(p, 40), status, body, http.StatusBadRequest, CodeInvalid)
		}
	}
	for _, c := range e.fake.Calls() {
		if strings.HasPrefix(c, "Upload") || strings.HasPrefix(c, "Download") {
			t.Errorf("manager reached with a bad path: %q", c)
		}
	}
	// The client refuses nothing itself but the server does.
	_, err := e.client.Upload(context.Background(), id, "/workspace/../etc/passwd", strings.NewReader("x"))
	if !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("client upload with ..: %v", err)
	}
}

func TestUploadTooLarge(t *testing.T) {
	const limit = 1 << 20
	e := newTestEnv(t, WithMaxUploadBytes(limit))
	id := mustCreate(t, e)
	ctx := context.Background()

	// Declared length over the limit: refused before the body is sent.
	_, err := e.client.Upload(ctx, id, "/workspace/big", bytes.NewReader(make([]byte, 2*limit)))
	wantClientError(t, "declared", err, http.StatusRequestEntityTooLarge, CodeTooLarge)
	if !errors.Is(err, sandbox.ErrTooLarge) {
		t.Errorf("declared: %v is not ErrTooLarge", err)
	}
	if slices.Contains(e.fake.Calls(), "Upload "+id+" /workspace/big") {
		t.Error("manager called for an upload declared too large")
	}
	// Undeclared length: cut at the limit while streaming.
	_, err = e.client.Upload(ctx, id, "/workspace/big2", io.MultiReader(bytes.NewReader(make([]byte, 3*limit))))
	wantClientError(t, "chunked", err, http.StatusRequestEntityTooLarge, CodeTooLarge)
	if _, err := e.fake.Download(ctx, id, "/workspace/big2", io.Discard); !errors.Is(err, sandbox.ErrNotFound) {
		t.Error("the fake stored a cut-off upload as if complete (the manager got no error)")
	}
	// Exactly the limit, declared or not, is accepted.
	for _, r := range []io.Reader{bytes.NewReader(make([]byte, limit)), io.MultiReader(bytes.NewReader(make([]byte, limit)))} {
		if n, err := e.client.Upload(ctx, id, "/workspace/exact", r); err != nil || n != limit {
			t.Errorf("upload of exactly the limit: %d, %v", n, err)
		}
	}
	// The connection pool still works after the refusals.
	if _, err := e.client.Get(ctx, id); err != nil {
		t.Errorf("Get after oversized uploads: %v", err)
	}
}

func TestDownloadCutOffIsAnError(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	var out bytes.Buffer
	_, err := e.client.Download(context.Background(), id, "/workspace/fail-midway", &out)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("download cut off: %v, want io.ErrUnexpectedEOF", err)
	}
}
