package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// syncBuffer is a bytes.Buffer safe for the server's and the test's
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testEnv is a server over a fake manager on a real Unix socket.
type testEnv struct {
	fake   *sandboxtest.Manager
	cells  *blockCells
	client *Client
	sock   string
	log    *syncBuffer
	// raw speaks HTTP to the socket without the typed client.
	raw *http.Client
}

// blockCells is the api tests' own cell for the fake, "block": one
// stdout event "first", then it waits for free (or its context, or 5 s).
// Its channels let a test see it start and see its context cancelled.
type blockCells struct {
	// started receives once per "block" cell after its first event.
	started chan struct{}
	// release lets every "block" cell finish; free closes it.
	release  chan struct{}
	freeOnce sync.Once
	// canceled receives when a "block" cell sees its context end.
	canceled chan struct{}
	// timedOut is set when a "block" cell gave up waiting.
	timedOut atomic.Bool
}

func newBlockCells() *blockCells {
	return &blockCells{started: make(chan struct{}, 4), release: make(chan struct{}), canceled: make(chan struct{}, 4)}
}

// free lets the "block" cells finish.
func (b *blockCells) free() { b.freeOnce.Do(func() { close(b.release) }) }

func (b *blockCells) script(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
	if c.Code != "block" {
		return cell.Result{}, sandboxtest.Pass
	}
	res := cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "first\n"}
	c.Emit(cell.Event{Type: cell.EventStdout, Text: "first\n"})
	b.started <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
		b.canceled <- struct{}{}
		res.Status = cell.StatusError
		res.Error = &cell.Error{Name: "KeyboardInterrupt", Value: "interrupted"}
	case <-time.After(5 * time.Second):
		b.timedOut.Store(true)
	}
	return res, nil
}

// contractBreaker is the fake with two cells a faulty manager could
// answer, which sandboxtest (keeping the contract) never does:
//
//	"lost-mid"  one stdout event, then an error instead of a result
//	"quiet"     a result with no events at all, not even the end
type contractBreaker struct{ *sandboxtest.Manager }

func (m contractBreaker) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	code := c.Code
	switch code {
	case "lost-mid":
		if onEvent != nil {
			onEvent(cell.Event{Type: cell.EventStdout, Text: "partial\n"})
		}
		return cell.Result{}, fmt.Errorf("%w: VM exited", sandbox.ErrLost)
	case "quiet":
		return cell.Result{Status: cell.StatusOK, StateKept: true, Stdout: "quiet\n"}, nil
	}
	return m.Manager.RunCell(ctx, id, c, onEvent)
}

// shortTempDir returns a temporary directory with a path short enough for
// a Unix socket (t.TempDir can exceed 108 bytes with long test names).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cvapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newTestEnv(t *testing.T, opts ...Option) *testEnv {
	t.Helper()
	return newTestEnvListen(t, nil, opts...)
}

func newTestEnvListen(t *testing.T, lopts []ListenOption, opts ...Option) *testEnv {
	t.Helper()
	return newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return contractBreaker{m} }, lopts, opts...)
}

// newTestEnvWith is newTestEnvListen with the manager the server calls
// made from the fake by wrap (a tenant.Manager, say).
func newTestEnvWith(t *testing.T, wrap func(*sandboxtest.Manager) sandbox.Manager, lopts []ListenOption, opts ...Option) *testEnv {
	t.Helper()
	sock := filepath.Join(shortTempDir(t), "api.sock")
	logBuf := &syncBuffer{}
	log := slog.New(slog.NewJSONHandler(logBuf, nil))
	fake := sandboxtest.New()
	cells := newBlockCells()
	fake.Script = cells.script
	ln, err := ListenUnix(sock, lopts...)
	if err != nil {
		t.Fatalf("ListenUnix: %v", err)
	}
	srv := NewHTTPServer(NewServer(wrap(fake), log, opts...))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	}()
	client := NewClient(sock)
	raw := &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(func() {
		// Let any cell still blocked in the fake finish.
		cells.free()
		client.Close()
		raw.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	})
	return &testEnv{fake: fake, cells: cells, client: client, sock: sock, log: logBuf, raw: raw}
}

// do sends a raw request and returns status, headers and body.
func (e *testEnv) do(t *testing.T, method, path string, body io.Reader, hdr ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://cellvm"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.raw.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, b
}

// doRawPath sends a request whose path is written on the wire as is (no
// re-escaping by net/url), for traversal tests.
func (e *testEnv) doRawPath(t *testing.T, method, rawPath string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://cellvm/", body)
	if err != nil {
		t.Fatal(err)
	}
	req.URL.Opaque = rawPath
	resp, err := e.raw.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawPath, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// wantAPIError checks that a raw response is a JSON error with status and
// code.
func wantAPIError(t *testing.T, what string, status int, body []byte, wantStatus int, wantCode string) *Error {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: status %d, want %d (body %s)", what, status, wantStatus, body)
	}
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
		t.Errorf("%s: body is not a JSON error: %q (%v)", what, body, err)
		return nil
	}
	if eb.Error.Code != wantCode {
		t.Errorf("%s: code %q, want %q (message %q)", what, eb.Error.Code, wantCode, eb.Error.Message)
	}
	if eb.Error.Message == "" {
		t.Errorf("%s: empty error message", what)
	}
	return eb.Error
}

// wantClientError checks that err is an *Error with status and code.
func wantClientError(t *testing.T, what string, err error, wantStatus int, wantCode string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T), want *api.Error", what, err, err)
	}
	if e.Status != wantStatus || e.Code != wantCode {
		t.Errorf("%s: got %d %s (%s), want %d %s", what, e.Status, e.Code, e.Message, wantStatus, wantCode)
	}
	return e
}

func jsonBody(s string) io.Reader { return strings.NewReader(s) }

func mustCreate(t *testing.T, e *testEnv) string {
	t.Helper()
	info, err := e.client.Create(context.Background(), sandboxConfigForTest())
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return info.ID
}
