package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// fakeReadyHost scripts the host side of the ready port for an Announcer:
// the first refuse dials are refused, the rest get a pipe whose host end
// is sent on conns. sleeps and the clock are the announcer's.
type fakeReadyHost struct {
	refuse int
	conns  chan net.Conn

	mu     sync.Mutex
	dials  int
	sleeps []time.Duration
	clock  time.Time
}

func (h *fakeReadyHost) dial() (net.Conn, error) {
	h.mu.Lock()
	h.dials++
	n := h.dials
	h.mu.Unlock()
	if n <= h.refuse {
		return nil, errors.New("connection reset by peer")
	}
	guest, host := net.Pipe()
	h.conns <- host
	return guest, nil
}

func (h *fakeReadyHost) sleep(ctx context.Context, d time.Duration) bool {
	h.mu.Lock()
	h.sleeps = append(h.sleeps, d)
	h.mu.Unlock()
	return ctx.Err() == nil
}

func (h *fakeReadyHost) now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock
}

func (h *fakeReadyHost) advance(d time.Duration) {
	h.mu.Lock()
	h.clock = h.clock.Add(d)
	h.mu.Unlock()
}

// takeSleeps returns the backoffs slept so far, and forgets them.
func (h *fakeReadyHost) takeSleeps() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.sleeps
	h.sleeps = nil
	return s
}

// readLine reads the ready line the announcer wrote on host.
func readLine(t *testing.T, host net.Conn) string {
	t.Helper()
	host.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(host).ReadString('\n')
	if err != nil {
		t.Fatalf("read the ready line: %v", err)
	}
	return line
}

// TestAnnouncerReconnects: refused connects are retried with a backoff
// that doubles from 5 ms to a cap of 2 s; every connection carries the
// ready line and is held; one that the host kept for a while (a
// snapshot's reset ends it) is followed at once by the next, one the host
// ends at once after the shortest backoff; the announcer stops with its
// context, closing its connection.
func TestAnnouncerReconnects(t *testing.T) {
	h := &fakeReadyHost{refuse: 12, conns: make(chan net.Conn), clock: time.Unix(1000, 0)}
	line := ReadyLine()
	if !strings.HasPrefix(line, proto.ReadyPrefix+" ") || !strings.HasSuffix(line, "\n") || len(line) > proto.MaxReadyLine {
		t.Fatalf("ready line %q", line)
	}
	// The log is the guest's serial console: only the first announcement
	// is at Info; those after a reset, on a start's path, are not.
	var logs bytes.Buffer
	a := &Announcer{Dial: h.dial, Line: line, sleep: h.sleep, now: h.now,
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { a.Run(ctx); close(ran) }()

	// Twelve refusals, then a connection.
	host := <-h.conns
	if got := readLine(t, host); got != line {
		t.Errorf("first connection's line %q, want %q", got, line)
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, 1280 * ms, 2000 * ms, 2000 * ms, 2000 * ms}
	if got := h.takeSleeps(); !slices.Equal(got, want) {
		t.Errorf("backoffs while refused: %v, want %v", got, want)
	}
	// Held: nothing more happens while the connection lives.
	select {
	case c := <-h.conns:
		t.Fatalf("a second connection %v while the first is held", c)
	case <-time.After(50 * time.Millisecond):
	}

	// A snapshot's reset ends a connection the host kept: the next one at
	// once, with no backoff.
	h.advance(5 * time.Second)
	host.Close()
	host = <-h.conns
	if got := readLine(t, host); got != line {
		t.Errorf("line after a reset %q", got)
	}
	if got := h.takeSleeps(); len(got) != 0 {
		t.Errorf("slept %v before announcing again after a reset, want at once", got)
	}

	// Ended at once by the host: the shortest backoff (the last stable
	// connection reset it), not a tight loop.
	host.Close()
	host = <-h.conns
	readLine(t, host)
	if got := h.takeSleeps(); !slices.Equal(got, []time.Duration{minBackoff}) {
		t.Errorf("backoff after a connection ended at once: %v, want [%v]", got, minBackoff)
	}

	cancel()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the announcer did not stop with its context")
	}
	host.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := host.Read(make([]byte, 1)); err == nil {
		t.Error("the announcer's connection is still open after it stopped")
	}
	if h.dials != 15 {
		t.Errorf("%d dials, want 15", h.dials)
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 || !strings.Contains(logs.String(), "ready: announced to the host") {
		t.Errorf("Info log over 3 announcements: %q; want the first one's line alone", logs.String())
	}
}
