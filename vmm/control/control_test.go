package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func serve(t *testing.T, h Handler) string { return serveWith(t, h, nil) }

// serveWith serves h and ws on a new socket until the test ends.
func serveWith(t *testing.T, h Handler, ws WorkingSetHandler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { ServeWith(ln, h, ws, func() {}, slog.New(slog.DiscardHandler)); close(done) }()
	t.Cleanup(func() {
		ln.Close()
		<-done // Serve returns once its listener is closed
	})
	return sock
}

func files(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	dir := t.TempDir()
	var out [2]*os.File
	for i, name := range []string{"state", "memory"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		out[i] = f
	}
	return out[0], out[1]
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestSnapshotRequest(t *testing.T) {
	var gotThen Then
	sock := serve(t, func(state, memory *os.File, req Request) error {
		gotThen = req.Then
		if _, err := state.WriteString("the state"); err != nil {
			return err
		}
		_, err := memory.WriteString("the memory")
		return err
	})
	state, memory := files(t)
	if err := Snapshot(ctx(t), sock, state, memory, ThenStop); err != nil {
		t.Fatal(err)
	}
	if gotThen != ThenStop {
		t.Errorf("handler got then=%q", gotThen)
	}
	for f, want := range map[*os.File]string{state: "the state", memory: "the memory"} {
		b, err := os.ReadFile(f.Name())
		if err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", f.Name(), b, err, want)
		}
	}
}

// TestHandlerError: the requester gets the handler's error with its code:
// a full disk anywhere in its chain is no_space, a code the handler gave
// is kept, anything else is failed.
func TestHandlerError(t *testing.T) {
	for _, c := range []struct {
		err  error
		code Code
	}{
		{errors.New("the device would not pause"), CodeFailed},
		{fmt.Errorf("snapshot: %w", &os.PathError{Op: "write", Path: "vm.mem", Err: syscall.ENOSPC}), CodeNoSpace},
		{WithCode(CodeNotRunning, errors.New("the machine is not running")), CodeNotRunning},
	} {
		sock := serve(t, func(*os.File, *os.File, Request) error { return c.err })
		state, memory := files(t)
		err := Snapshot(ctx(t), sock, state, memory, ThenResume)
		if err == nil || !strings.Contains(err.Error(), c.err.Error()) {
			t.Errorf("Snapshot = %v, want the handler's error %q", err, c.err)
		}
		if !errors.Is(err, c.code) {
			t.Errorf("Snapshot = %v: not errors.Is %s", err, c.code)
		}
		for _, other := range []Code{CodeFailed, CodeNoSpace, CodeNotRunning, CodeBadRequest} {
			if other != c.code && errors.Is(err, other) {
				t.Errorf("Snapshot = %v: errors.Is %s as well as %s", err, other, c.code)
			}
		}
	}
}

// TestBadRequests: a request without its two files, or with an unknown op
// or then, is answered with an error and never reaches the handler.
func TestBadRequests(t *testing.T) {
	called := false
	sock := serve(t, func(*os.File, *os.File, Request) error { called = true; return nil })
	state, memory := files(t)
	for _, c := range []struct {
		name string
		line string
		fds  []int
		want string
	}{
		{"no files", `{"op":"snapshot","then":"resume"}`, nil, "carries 2 files"},
		{"one file", `{"op":"snapshot","then":"resume"}`, []int{int(state.Fd())}, "carries 2 files"},
		{"three files", `{"op":"snapshot","then":"resume"}`, []int{int(state.Fd()), int(memory.Fd()), int(state.Fd())}, "carries 2 files"},
		{"unknown op", `{"op":"format-disk","then":"resume"}`, []int{int(state.Fd()), int(memory.Fd())}, "unknown op"},
		{"unknown then", `{"op":"snapshot","then":"explode"}`, []int{int(state.Fd()), int(memory.Fd())}, "want"},
		{"not JSON", `snapshot please`, []int{int(state.Fd()), int(memory.Fd())}, "request"},
	} {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		var rights []byte
		if c.fds != nil {
			rights = unix.UnixRights(c.fds...)
		}
		if _, _, err := conn.(*net.UnixConn).WriteMsgUnix([]byte(c.line+"\n"), rights, nil); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var r Reply
		if err := json.NewDecoder(conn).Decode(&r); err != nil && err != io.EOF {
			t.Fatalf("%s: read reply: %v", c.name, err)
		}
		conn.Close()
		if r.OK || !strings.Contains(r.Error, c.want) || r.Code != CodeBadRequest {
			t.Errorf("%s: reply %+v, want a bad_request error saying %q", c.name, r, c.want)
		}
	}
	if called {
		t.Error("a bad request reached the handler")
	}
}

func TestNoVMM(t *testing.T) {
	state, memory := files(t)
	err := Snapshot(ctx(t), filepath.Join(t.TempDir(), "nobody.sock"), state, memory, ThenResume)
	if err == nil || !strings.Contains(err.Error(), "control socket") {
		t.Fatalf("Snapshot to no VMM = %v", err)
	}
}

// TestStopComesAfterTheReply: a ThenStop snapshot that was written ends
// the VM only once its requester has the answer; a ThenResume one, or one
// that failed, does not end it.
func TestStopComesAfterTheReply(t *testing.T) {
	stops := make(chan struct{}, 4)
	var fail atomic.Bool
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go Serve(ln, func(*os.File, *os.File, Request) error {
		if fail.Load() {
			return errors.New("disk full")
		}
		return nil
	}, func() { stops <- struct{}{} }, slog.New(slog.DiscardHandler))
	state, memory := files(t)
	if err := Snapshot(ctx(t), sock, state, memory, ThenResume); err != nil {
		t.Fatal(err)
	}
	if err := Snapshot(ctx(t), sock, state, memory, ThenStop); err != nil {
		t.Fatalf("ThenStop: %v (the reply must come before the stop)", err)
	}
	select {
	case <-stops:
	case <-time.After(10 * time.Second):
		t.Fatal("a written ThenStop snapshot did not stop the VM")
	}
	fail.Store(true)
	if err := Snapshot(ctx(t), sock, state, memory, ThenStop); err == nil {
		t.Fatal("the failing handler's snapshot succeeded")
	}
	if err := Snapshot(ctx(t), sock, state, memory, ThenResume); err == nil {
		t.Fatal("the failing handler's snapshot succeeded")
	}
	if len(stops) != 0 {
		t.Errorf("%d more stops: a ThenResume or a failed snapshot stopped the VM", len(stops))
	}
}

// TestEndlessReplyIsBounded: a VMM (compromised) that answers with an
// endless reply costs the daemon at most MaxReplyBytes, and the request
// fails at once rather than when its deadline ends. The daemon's memory
// stays flat: what the request allocates in all is a small multiple of
// the bound, not of what the VMM sent.
func TestEndlessReplyIsBounded(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var sent atomic.Int64
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		// Allocated once: the sender's own allocations stay out of the
		// measure below.
		head := []byte(`{"ok":true,"error":"` + strings.Repeat("x", 4096))
		body := []byte(strings.Repeat("x", 4096))
		chunk := head
		for {
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
			chunk = body
		}
	}()
	state, memory := files(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	err = Snapshot(ctx(t), sock, state, memory, ThenResume)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an endless reply: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("the refusal took %v", took)
	}
	// The JSON decoder's buffer doubles up to the bound: its sum is under
	// 4x; the rest is the connection and the error.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*MaxReplyBytes+64<<10 {
		t.Errorf("an endless reply cost %d bytes of allocation (the VMM sent %d), want at most %d", alloc, sent.Load(), 4*MaxReplyBytes+64<<10)
	}
}
