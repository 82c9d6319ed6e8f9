package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestFileOpsThroughTheAgent: the Manager's file calls reach the fake
// VMM's real agent and come back as the contract's types and errors;
// watches are bounded per sandbox; DialPort reaches a server on the
// agent's loopback, and a closed port is ErrPortClosed.
func TestFileOpsThroughTheAgent(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_VMM", "agent")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, state := newFakeManager(t, exe, 30*time.Second)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	dir := t.TempDir()
	sub := filepath.Join(dir, "x", "y")
	if created, err := m.MakeDir(ctx, id, sandbox.FileRequest{Path: sub}); err != nil || !created {
		t.Fatalf("mkdir: %v %v", created, err)
	}
	os.WriteFile(filepath.Join(sub, "f"), []byte("abc"), 0o600)
	ents, err := m.ListDir(ctx, id, sandbox.FileRequest{Path: dir, Depth: 3})
	if err != nil || len(ents) != 3 {
		t.Fatalf("list: %+v %v", ents, err)
	}
	e, err := m.StatPath(ctx, id, sandbox.FileRequest{Path: filepath.Join(sub, "f")})
	if err != nil || e.Size != 3 || e.Type != sandbox.FileTypeFile || e.Mode != 0o600 || e.ModTime.IsZero() {
		t.Fatalf("stat: %+v %v", e, err)
	}
	if e, err = m.MovePath(ctx, id, sandbox.FileRequest{Path: filepath.Join(sub, "f")}, filepath.Join(dir, "g")); err != nil || e.Name != "g" {
		t.Fatalf("move: %+v %v", e, err)
	}
	if err := m.RemovePath(ctx, id, sandbox.FileRequest{Path: filepath.Join(dir, "x")}); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"missing": func() error {
			_, err := m.StatPath(ctx, id, sandbox.FileRequest{Path: filepath.Join(dir, "x")})
			return err
		}(),
		"root":   func() error { _, err := m.ListDir(ctx, id, sandbox.FileRequest{Path: dir, User: "root"}); return err }(),
		"dotdot": func() error { _, err := m.ListDir(ctx, id, sandbox.FileRequest{Path: dir + "/../etc"}); return err }(),
		"depth":  func() error { _, err := m.ListDir(ctx, id, sandbox.FileRequest{Path: dir, Depth: 99}); return err }(),
		"port":   func() error { _, err := m.DialPort(ctx, id, 70000); return err }(),
		"nobox":  func() error { _, err := m.ListDir(ctx, "sb-nope", sandbox.FileRequest{Path: dir}); return err }(),
	} {
		want := map[string]error{"missing": sandbox.ErrNotFound, "root": sandbox.ErrForbidden, "dotdot": sandbox.ErrInvalid,
			"depth": sandbox.ErrInvalid, "port": sandbox.ErrInvalid, "nobox": sandbox.ErrNotFound}[what]
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", what, err, want)
		}
	}

	// Watches: the zero event first, then the change; at most MaxWatches.
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	ready := make(chan struct{}, sandbox.MaxWatches)
	got := make(chan sandbox.FileEvent, 16)
	for i := range sandbox.MaxWatches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.WatchDir(wctx, id, sandbox.FileRequest{Path: dir}, func(e sandbox.FileEvent) error {
				if e == (sandbox.FileEvent{}) {
					ready <- struct{}{}
				} else if i == 0 {
					got <- e
				}
				return nil
			})
		}()
	}
	for range sandbox.MaxWatches {
		<-ready
	}
	if err := m.WatchDir(ctx, id, sandbox.FileRequest{Path: dir}, func(sandbox.FileEvent) error { return nil }); !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("watch past MaxWatches: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "new"), nil, 0o644)
	select {
	case e := <-got:
		if e != (sandbox.FileEvent{Name: "new", Op: sandbox.FileCreate}) {
			t.Errorf("event %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Error("no event")
	}
	cancel()
	wg.Wait()

	// Ports.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			nc.Write([]byte("hello from the guest"))
			nc.Close()
		}
	}()
	conn, err := m.DialPort(ctx, id, ln.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	vs, _ := m.get(id)
	vs.lastUsed.Store(1)
	b, err := io.ReadAll(conn)
	conn.Close()
	if vs.lastUsed.Load() == 1 {
		t.Error("bytes from the port did not mark the sandbox used")
	}
	if string(b) != "hello from the guest" || err != nil {
		t.Fatalf("port read %q %v", b, err)
	}
	// At most maxPortConns open at once; a closed one gives its place back.
	var open []net.Conn
	for range maxPortConns {
		c, err := m.DialPort(ctx, id, ln.Addr().(*net.TCPAddr).Port)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	if _, err := m.DialPort(ctx, id, ln.Addr().(*net.TCPAddr).Port); !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("port connection past the bound: %v", err)
	}
	for _, c := range open {
		c.Close()
		c.Close() // idempotent
	}
	ln.Close()
	if _, err := m.DialPort(ctx, id, ln.Addr().(*net.TCPAddr).Port); !errors.Is(err, sandbox.ErrPortClosed) {
		t.Errorf("closed port: %v", err)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, m, state)
	watches.Lock()
	left := len(watches.n)
	watches.Unlock()
	portConns.Lock()
	left += len(portConns.n)
	portConns.Unlock()
	if left != 0 {
		t.Errorf("%d sandboxes still count watches or port connections", left)
	}
}
