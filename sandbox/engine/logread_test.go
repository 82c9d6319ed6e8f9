package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

func collectLog(t *testing.T, path string, req sandbox.LogRequest) []sandbox.LogLine {
	t.Helper()
	var out []sandbox.LogLine
	err := readLog(context.Background(), path, req, func() bool { return true }, func(l sandbox.LogLine) error {
		out = append(out, l)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func texts(ls []sandbox.LogLine) string {
	var b []string
	for _, l := range ls {
		b = append(b, l.Text)
	}
	return strings.Join(b, "|")
}

func TestReadLogTailFilterAndCut(t *testing.T) {
	p := filepath.Join(t.TempDir(), "console.log")
	long := strings.Repeat("x", sandbox.MaxLogLineBytes+10)
	os.WriteFile(p, []byte("[    0.1] kernel\ntime=T level=INFO msg=\"agent up\"\n"+long+"\nhalf a li"), 0o600)
	if got := texts(collectLog(t, p, sandbox.LogRequest{Source: sandbox.LogConsole, Tail: 2})); got != `time=T level=INFO msg="agent up"|`+long[:sandbox.MaxLogLineBytes] {
		t.Errorf("console tail 2: %.100q", got)
	}
	all := collectLog(t, p, sandbox.LogRequest{Source: sandbox.LogConsole, Tail: 100})
	if len(all) != 3 || all[2].Cut != 10 {
		t.Errorf("console tail 100: %d lines, last cut %d; want 3 and 10 (an unfinished line is not sent)", len(all), all[len(all)-1].Cut)
	}
	if got := texts(collectLog(t, p, sandbox.LogRequest{Source: sandbox.LogAgent, Tail: 100})); got != `time=T level=INFO msg="agent up"` {
		t.Errorf("agent lines: %q", got)
	}
	if got := collectLog(t, p, sandbox.LogRequest{Source: sandbox.LogConsole, Tail: 0}); len(got) != 0 {
		t.Errorf("tail 0 sent %d lines", len(got))
	}
	if got := collectLog(t, filepath.Join(t.TempDir(), "none"), sandbox.LogRequest{Source: sandbox.LogVMM, Tail: 5}); len(got) != 0 {
		t.Errorf("a missing file sent %d lines", len(got))
	}
	for _, bad := range []sandbox.LogRequest{{Source: "kernel"}, {Source: sandbox.LogVMM, Tail: -1}, {Source: sandbox.LogVMM, Tail: sandbox.MaxLogTail + 1}} {
		if err := bad.Validate(); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestReadLogFollow: lines written after the tail arrive, a line written in
// two pieces arrives once whole, and the sandbox's deletion ends the follow
// after a last read.
func TestReadLogFollow(t *testing.T) {
	p := filepath.Join(t.TempDir(), "vmm.log")
	os.WriteFile(p, []byte("old 1\nold 2\n"), 0o600)
	var mu sync.Mutex
	var deleted bool
	lines := make(chan string, 16)
	done := make(chan error, 1)
	go func() {
		done <- readLog(context.Background(), p, sandbox.LogRequest{Source: sandbox.LogVMM, Tail: 1, Follow: true},
			func() bool { mu.Lock(); defer mu.Unlock(); return deleted },
			func(l sandbox.LogLine) error { lines <- l.Text; return nil })
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-time.After(10 * time.Second):
			t.Fatal("no line")
			return ""
		}
	}
	if l := next(); l != "old 2" {
		t.Fatalf("tail: %q", l)
	}
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("new 1\nnew ")
	if l := next(); l != "new 1" {
		t.Fatalf("followed: %q", l)
	}
	f.WriteString("2\n")
	if l := next(); l != "new 2" {
		t.Fatalf("a line in two writes: %q", l)
	}
	f.Close()
	f, _ = os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("last words\n")
	f.Close()
	mu.Lock()
	deleted = true
	mu.Unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(lines)
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	if strings.Join(rest, "|") != "last words" {
		t.Errorf("lines at the end: %q, want the last line written before the deletion", rest)
	}
}

// TestReadNewAfterShrink: a log that shrank below the offset read so far
// (compacted in place) is read on from its new end, not from its start
// again (which would repeat lines) and not from the old offset (which
// would skip its new lines for ever).
func TestReadNewAfterShrink(t *testing.T) {
	p := filepath.Join(t.TempDir(), "console.log")
	os.WriteFile(p, []byte("kept\n"), 0o600)
	var got []string
	send := func(l sandbox.LogLine) error { got = append(got, l.Text); return nil }
	off, _, err := readNew(p, 100, nil, sandbox.LogConsole, logFilter(sandbox.LogConsole), send)
	if err != nil || off != 5 || len(got) != 0 {
		t.Fatalf("after shrinking: offset %d, lines %q, %v; want 5 and none", off, got, err)
	}
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("new\n")
	f.Close()
	if _, _, err := readNew(p, off, nil, sandbox.LogConsole, logFilter(sandbox.LogConsole), send); err != nil || strings.Join(got, "|") != "new" {
		t.Errorf("lines after the shrink: %q %v", got, err)
	}
}

func TestNewID(t *testing.T) {
	if id := newID("n1"); !strings.HasPrefix(id, "sb-n1-") || len(id) != len("sb-n1-")+12 {
		t.Errorf("id %q", id)
	}
	if id := newID(""); !strings.HasPrefix(id, "sb-") || len(id) != 15 {
		t.Errorf("id %q", id)
	}
}
