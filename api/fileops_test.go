package api

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// TestFileRoutes: list, stat, mkdir, move and remove through the client,
// and the errors each maps to.
func TestFileRoutes(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ctx := context.Background()
	c := e.client
	if created, err := c.MakeDir(ctx, id, sandbox.FileRequest{Path: "/workspace/a/b"}); err != nil || !created {
		t.Fatalf("mkdir: %v %v", created, err)
	}
	if created, err := c.MakeDir(ctx, id, sandbox.FileRequest{Path: "/workspace/a/b"}); err != nil || created {
		t.Fatalf("mkdir again: %v %v", created, err)
	}
	if _, err := c.Upload(ctx, id, "/workspace/a/b/f.txt", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	ents, err := c.ListDir(ctx, id, sandbox.FileRequest{Path: "/workspace/a", Depth: 2})
	if err != nil || len(ents) != 2 || ents[0].Path != "/workspace/a/b" || ents[0].Type != sandbox.FileTypeDir || ents[1].Size != 5 {
		t.Fatalf("list: %+v %v", ents, err)
	}
	st, err := c.StatPath(ctx, id, sandbox.FileRequest{Path: "workspace/a/b/f.txt"})
	if err != nil || st.Type != sandbox.FileTypeFile || st.Size != 5 {
		t.Fatalf("stat: %+v %v", st, err)
	}
	if st, err = c.MovePath(ctx, id, sandbox.FileRequest{Path: "/workspace/a"}, "/workspace/z"); err != nil || st.Path != "/workspace/z" {
		t.Fatalf("move: %+v %v", st, err)
	}
	if _, err := c.StatPath(ctx, id, sandbox.FileRequest{Path: "/workspace/z/b/f.txt"}); err != nil {
		t.Fatalf("the moved file: %v", err)
	}
	if err := c.RemovePath(ctx, id, sandbox.FileRequest{Path: "/workspace/z"}); err != nil {
		t.Fatal(err)
	}
	_, err = c.StatPath(ctx, id, sandbox.FileRequest{Path: "/workspace/z/b/f.txt"})
	wantClientError(t, "stat of a removed file", err, http.StatusNotFound, CodeNotFound)
	err = c.RemovePath(ctx, id, sandbox.FileRequest{Path: "/workspace/z"})
	wantClientError(t, "remove of a missing path", err, http.StatusNotFound, CodeNotFound)
	_, err = c.ListDir(ctx, id, sandbox.FileRequest{Path: "/root"})
	wantClientError(t, "the cell user lists /root", err, http.StatusForbidden, CodeForbidden)
	_, err = c.ListDir(ctx, id, sandbox.FileRequest{Path: "/workspace", User: "root"})
	wantClientError(t, "root in a sandbox without root", err, http.StatusForbidden, CodeForbidden)
	_, err = c.ListDir(ctx, "sb-nope", sandbox.FileRequest{Path: "/workspace"})
	wantClientError(t, "an unknown sandbox", err, http.StatusNotFound, CodeNotFound)
	for what, path := range map[string]string{
		"depth":     "/v1/sandboxes/" + id + "/dir/workspace?depth=17",
		"NaN depth": "/v1/sandboxes/" + id + "/dir/workspace?depth=x",
		"user":      "/v1/sandboxes/" + id + "/dir/workspace?user=bob",
		"proc":      "/v1/sandboxes/" + id + "/stat/proc/1",
		"recursive": "/v1/sandboxes/" + id + "/watch/workspace?recursive=maybe",
	} {
		status, _, body := e.do(t, "GET", path, nil)
		wantAPIError(t, what, status, body, http.StatusBadRequest, CodeInvalid)
	}
	status, _, body := e.do(t, "POST", "/v1/sandboxes/"+id+"/move", jsonBody(`{"from":"/workspace/x","to":"/etc/../x"}`))
	wantAPIError(t, "move to a path with ..", status, body, http.StatusBadRequest, CodeInvalid)
}

// TestWatchRoute: the stream starts once the watch is set, carries the
// changes, and ends (leaving no watch behind) when the client goes.
func TestWatchRoute(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	events := make(chan sandbox.FileEvent, 8)
	done := make(chan error, 1)
	go func() {
		done <- e.client.WatchDir(ctx, id, sandbox.FileRequest{Path: "/workspace", Recursive: true}, func(ev sandbox.FileEvent) error {
			if ev == (sandbox.FileEvent{}) {
				close(ready)
				return nil
			}
			events <- ev
			return nil
		})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("watch ended before it began: %v", err)
	}
	if _, err := e.client.MakeDir(context.Background(), id, sandbox.FileRequest{Path: "/workspace/d/e"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev != (sandbox.FileEvent{Name: "d/e", Op: sandbox.FileCreate}) {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	if _, err := e.client.Upload(context.Background(), id, "/workspace/d/e/f.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev != (sandbox.FileEvent{Name: "d/e/f.txt", Op: sandbox.FileCreate}) {
			t.Errorf("upload's event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event for the upload")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("a cancelled watch: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.fake.Watches(id) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server kept the watch after the client left")
		}
		time.Sleep(10 * time.Millisecond)
	}
	err := e.client.WatchDir(context.Background(), id, sandbox.FileRequest{Path: "/workspace/nope"}, func(sandbox.FileEvent) error { return nil })
	wantClientError(t, "watch of a missing directory", err, http.StatusNotFound, CodeNotFound)
}

// TestPortRoute: an upgraded connection reaches an HTTP server on a port
// of the sandbox; a closed port is 502 port_closed, and a request that
// does not ask to upgrade is refused.
func TestPortRoute(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	ln, err := e.fake.ListenPort(id, 8000)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "served "+r.URL.Path)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	conn, err := e.client.DialPort(context.Background(), id, 8000)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	conn.Close()
	if string(b) != "served /hello" {
		t.Fatalf("body %q", b)
	}
	_, err = e.client.DialPort(context.Background(), id, 8001)
	if !errors.Is(err, sandbox.ErrPortClosed) {
		t.Errorf("closed port: %v, want ErrPortClosed", err)
	}
	wantClientError(t, "closed port", err, http.StatusBadGateway, CodePortClosed)
	status, _, body := e.do(t, "GET", "/v1/sandboxes/"+id+"/ports/8000", nil)
	wantAPIError(t, "no upgrade", status, body, http.StatusBadRequest, CodeInvalid)
	status, _, body = e.do(t, "GET", "/v1/sandboxes/"+id+"/ports/0", nil, "Connection", "Upgrade", "Upgrade", "tcp")
	wantAPIError(t, "port 0", status, body, http.StatusBadRequest, CodeInvalid)
}

// TestFileRoutesKeepTenantsApart: another tenant's sandbox is 404 on
// every file and port route, exactly as a missing one.
func TestFileRoutesKeepTenantsApart(t *testing.T) {
	e := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { return tenant.New(m, tenant.Options{}) }, nil)
	ctx := context.Background()
	alpha, beta := e.client.ForTenant("alpha"), e.client.ForTenant("beta")
	info, err := alpha.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	if _, err := alpha.MakeDir(ctx, id, sandbox.FileRequest{Path: "/workspace/mine"}); err != nil {
		t.Fatal(err)
	}
	ln, err := e.fake.ListenPort(id, 9000)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	req := sandbox.FileRequest{Path: "/workspace/mine"}
	for what, err := range map[string]error{
		"ls":   func() error { _, err := beta.ListDir(ctx, id, req); return err }(),
		"stat": func() error { _, err := beta.StatPath(ctx, id, req); return err }(),
		"mkdir": func() error {
			_, err := beta.MakeDir(ctx, id, sandbox.FileRequest{Path: "/workspace/theirs"})
			return err
		}(),
		"mv":    func() error { _, err := beta.MovePath(ctx, id, req, "/workspace/x"); return err }(),
		"rm":    beta.RemovePath(ctx, id, req),
		"watch": beta.WatchDir(ctx, id, sandbox.FileRequest{Path: "/workspace"}, func(sandbox.FileEvent) error { return nil }),
		"port":  func() error { _, err := beta.DialPort(ctx, id, 9000); return err }(),
	} {
		wantClientError(t, "beta's "+what+" of alpha's sandbox", err, http.StatusNotFound, CodeNotFound)
	}
	if _, err := alpha.StatPath(ctx, id, req); err != nil {
		t.Errorf("alpha's directory after beta's tries: %v", err)
	}
}
