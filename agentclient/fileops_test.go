package agentclient

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
)

func fileErrCode(err error) string {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestFileOpsOnATempDir: mkdir, list (one and two levels), stat, move and
// remove through a real agent, and the errors a caller can act on.
func TestFileOpsOnATempDir(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	ctx := ctxT(t)
	base := t.TempDir()
	sub := filepath.Join(base, "a", "b")
	r, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileMkdir, Path: sub})
	if err != nil || r.Created == nil || !*r.Created {
		t.Fatalf("mkdir: %+v %v", r, err)
	}
	if r, err = c.FileOp(ctx, proto.FileOp{Kind: proto.FileMkdir, Path: sub}); err != nil || r.Created == nil || *r.Created {
		t.Fatalf("mkdir again: %+v %v", r, err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f.txt"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Symlink("b/f.txt", filepath.Join(base, "a", "link"))
	r, err = c.FileOp(ctx, proto.FileOp{Kind: proto.FileList, Path: filepath.Join(base, "a"), Depth: 1})
	if err != nil || len(r.Entries) != 2 {
		t.Fatalf("list depth 1: %+v %v", r, err)
	}
	types := map[string]string{}
	for _, e := range r.Entries {
		types[e.Name] = e.Type
	}
	if types["b"] != "dir" || types["link"] != "symlink" {
		t.Fatalf("types %v", types)
	}
	r, err = c.FileOp(ctx, proto.FileOp{Kind: proto.FileList, Path: filepath.Join(base, "a"), Depth: 2})
	if err != nil || len(r.Entries) != 3 {
		t.Fatalf("list depth 2: %+v %v", r, err)
	}
	r, err = c.FileOp(ctx, proto.FileOp{Kind: proto.FileStat, Path: filepath.Join(sub, "f.txt")})
	if err != nil || r.Entry == nil || r.Entry.Size != 5 || r.Entry.Mode != 0o640 || r.Entry.Type != "file" || r.Entry.Owner == "" {
		t.Fatalf("stat: %+v %v", r.Entry, err)
	}
	r, err = c.FileOp(ctx, proto.FileOp{Kind: proto.FileStat, Path: filepath.Join(base, "a", "link")})
	if err != nil || r.Entry.Type != "symlink" || r.Entry.SymlinkTarget != "b/f.txt" {
		t.Fatalf("stat of a symlink: %+v %v", r.Entry, err)
	}
	moved := filepath.Join(base, "g.txt")
	r, err = c.FileOp(ctx, proto.FileOp{Kind: proto.FileMove, Path: filepath.Join(sub, "f.txt"), To: moved})
	if err != nil || r.Entry == nil || r.Entry.Path != moved {
		t.Fatalf("move: %+v %v", r, err)
	}
	if _, err := os.Stat(moved); err != nil {
		t.Fatal(err)
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileMkdir, Path: filepath.Join(moved, "x")}); err == nil {
		t.Fatal("mkdir under a file worked")
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileMkdir, Path: moved}); fileErrCode(err) != proto.CodeExists {
		t.Fatalf("mkdir over a file: %v", err)
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileRemove, Path: filepath.Join(base, "a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !os.IsNotExist(err) {
		t.Fatalf("removed tree still there: %v", err)
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileRemove, Path: filepath.Join(base, "a")}); fileErrCode(err) != proto.CodeNotFound {
		t.Fatalf("remove of a missing path: %v", err)
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileList, Path: "/proc/self"}); fileErrCode(err) != proto.CodeBadPath {
		t.Fatalf("list of /proc: %v", err)
	}
	// A symlink out to a kernel tree: no mkdir through it, even of a
	// path whose parents are missing.
	os.Symlink("/proc", filepath.Join(base, "kernel"))
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileMkdir, Path: filepath.Join(base, "kernel", "x", "y")}); fileErrCode(err) != proto.CodeBadPath {
		t.Fatalf("mkdir through a symlink to /proc: %v", err)
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileList, Path: moved}); fileErrCode(err) != proto.CodeBadPath {
		t.Fatalf("list of a file: %v", err)
	}
	// The connection survived the refusals.
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileStat, Path: base}); err != nil {
		t.Fatal(err)
	}
}

// TestFileOpsActAsTheOwner: the cells' user cannot list root's
// directory or remove root's file; asking for root can.
func TestFileOpsActAsTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	base := t.TempDir()
	os.Chmod(filepath.Dir(base), 0o755)
	os.Chmod(base, 0o755)
	private := filepath.Join(base, "root")
	os.Mkdir(private, 0o700)
	os.WriteFile(filepath.Join(private, "secret"), []byte("x"), 0o600)
	c := serve(t, agent.Config{Interp: newFake(), Files: agent.FilePolicy{Owner: &agent.Owner{UID: 1000, GID: 1000}}})
	ctx := ctxT(t)
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileList, Path: private}); fileErrCode(err) != proto.CodeForbidden {
		t.Fatalf("the user listed root's directory: %v", err)
	}
	if _, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileRemove, Path: private}); err == nil {
		t.Fatal("the user removed root's directory")
	}
	if _, err := os.Stat(filepath.Join(private, "secret")); err != nil {
		t.Fatalf("root's file went: %v", err)
	}
	r, err := c.FileOp(ctx, proto.FileOp{Kind: proto.FileList, Path: private, Root: true})
	if err != nil || len(r.Entries) != 1 {
		t.Fatalf("root's list: %+v %v", r, err)
	}
}

// TestWatchSeesChanges: a recursive watch reports a file made in the
// directory and one made in a subdirectory created after the watch
// began; cancelling ends it, and the agent's side ends with it.
func TestWatchSeesChanges(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	dir := t.TempDir()
	if _, err := c.Health(ctxT(t)); err != nil { // the pooled connection, before counting
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(ctxT(t))
	ready := make(chan struct{})
	var mu sync.Mutex
	seen := map[proto.FileEvent]bool{}
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, proto.FileOp{Kind: proto.FileWatch, Path: dir, Recursive: true}, func() { close(ready) }, func(b []proto.FileEvent) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range b {
				seen[e] = true
			}
			return nil
		})
	}()
	<-ready
	os.WriteFile(filepath.Join(dir, "one"), []byte("1"), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	want := []proto.FileEvent{{Name: "one", Op: "create"}, {Name: "sub", Op: "create"}, {Name: "sub/two", Op: "create"}}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		if seen[want[1]] {
			mu.Unlock()
			break
		}
		mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no event for sub")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The subdirectory is watched once its create was reported.
	time.Sleep(50 * time.Millisecond)
	os.WriteFile(filepath.Join(dir, "sub", "two"), []byte("2"), 0o644)
	for {
		mu.Lock()
		all := true
		for _, w := range want {
			all = all && seen[w]
		}
		mu.Unlock()
		if all {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("events %v, want %v", seen, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a cancelled watch: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled watch did not return")
	}
	// Neither side keeps a goroutine of the watch (the agent's reader of
	// inotify, its batcher, the host's reader).
	for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after the watch, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
	}
	if err := c.Watch(ctxT(t), proto.FileOp{Kind: proto.FileWatch, Path: filepath.Join(dir, "one")}, func() {}, nil); fileErrCode(err) != proto.CodeBadPath {
		t.Fatalf("watch of a file: %v", err)
	}
}

// TestDialPortSplices: bytes go both ways between the host and a TCP
// server on the agent's loopback, half-closes pass through, and a port
// nothing listens on is port_closed.
func TestDialPortSplices(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer nc.Close()
				b, _ := io.ReadAll(nc) // until the host's half-close
				nc.Write([]byte(strings.ToUpper(string(b))))
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	conn, err := c.DialPort(ctxT(t), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	big := strings.Repeat("abc", 700<<10) // more than a frame
	go func() {
		conn.Write([]byte(big))
		conn.(interface{ CloseWrite() error }).CloseWrite()
	}()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != strings.ToUpper(big) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln2.Addr().(*net.TCPAddr).Port
	ln2.Close()
	if _, err := c.DialPort(ctxT(t), closed); fileErrCode(err) != proto.CodePortClosed {
		t.Fatalf("dial of a closed port: %v", err)
	}
	if _, err := c.DialPort(ctxT(t), 0); err == nil {
		t.Fatal("port 0 dialled")
	}
}

// TestListIsBounded: a tree of more than MaxListEntries is too_large,
// not a message the host must refuse; the client goes on working.
func TestListIsBounded(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	dir := t.TempDir()
	for i := range proto.MaxListEntries + 1 {
		f, err := os.Create(filepath.Join(dir, "f"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if _, err := c.FileOp(ctxT(t), proto.FileOp{Kind: proto.FileList, Path: dir}); fileErrCode(err) != proto.CodeTooLarge {
		t.Fatalf("list of %d files: %v", proto.MaxListEntries+1, err)
	}
	os.Remove(filepath.Join(dir, "f0"))
	r, err := c.FileOp(ctxT(t), proto.FileOp{Kind: proto.FileList, Path: dir})
	if err != nil || len(r.Entries) != proto.MaxListEntries {
		t.Fatalf("list of exactly the bound: %d entries, %v", len(r.Entries), err)
	}
}

// TestWatchCoalescesAFlood: a file written thousands of times costs the
// host a few batches, each naming the write once.
func TestWatchCoalescesAFlood(t *testing.T) {
	c := serve(t, agent.Config{Interp: newFake()})
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ready := make(chan struct{})
	var mu sync.Mutex
	batches, writes := 0, 0
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, proto.FileOp{Kind: proto.FileWatch, Path: dir}, func() { close(ready) }, func(b []proto.FileEvent) error {
			mu.Lock()
			defer mu.Unlock()
			batches++
			for _, e := range b {
				if e.Name == "f" && e.Op == "write" {
					writes++
				}
			}
			return nil
		})
	}()
	<-ready
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	start := time.Now()
	for range n {
		f.Write([]byte("x"))
	}
	f.Close()
	elapsed := time.Since(start)
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// One batch per 50 ms window at most (plus the edges).
	if max := int(elapsed/(50*time.Millisecond)) + 3; batches > max || writes > batches || writes == 0 {
		t.Errorf("%d writes in %v came as %d batches naming the write %d times, want at most %d batches, one write each", n, elapsed, batches, writes, max)
	}
}
