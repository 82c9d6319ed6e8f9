package agentclient

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/agent"
)

// guestConnect connects to the ready socket as the VMM does for the
// agent's announcement, and writes what.
func guestConnect(t *testing.T, path, what string) net.Conn {
	t.Helper()
	nc, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect to the ready socket: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	if what != "" {
		io.WriteString(nc, what)
	}
	return nc
}

// hostClosed reports whether the host closed nc (a read ends with EOF or
// a reset rather than its deadline).
func hostClosed(nc net.Conn, within time.Duration) bool {
	nc.SetReadDeadline(time.Now().Add(within))
	_, err := io.ReadAll(nc)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func signalled(r *ReadyListener) bool {
	select {
	case <-r.Ready():
		return true
	default:
		return false
	}
}

// TestReadyListenerSignal: the socket is owner-only; connections that
// bring a wrong line, a line past the bound, or nothing within the
// deadline are closed and do not signal; the first ready line does, and
// its connection is held open. The listener goes on listening for the
// VM's life: a second announcement (the agent's, after a snapshot reset
// its connection) replaces the first, which the host closes. Close closes
// the held connection and removes the socket, and is idempotent.
func TestReadyListenerSignal(t *testing.T) {
	saved := readyLineTimeout
	readyLineTimeout = 200 * time.Millisecond
	defer func() { readyLineTimeout = saved }()
	path := filepath.Join(t.TempDir(), "vsock.sock_1025")
	os.WriteFile(path, nil, 0o600) // a stale one is replaced
	r, err := ListenReady(path, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the ready socket: %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}
	for _, bad := range []string{"HELLO\n", "READ\n", strings.Repeat("R", 65), "READY without a newline", ""} {
		nc := guestConnect(t, path, bad)
		if !hostClosed(nc, 10*time.Second) {
			t.Errorf("a connection bringing %.20q was not closed", bad)
		}
		if signalled(r) {
			t.Fatalf("%.20q signalled", bad)
		}
	}
	first := guestConnect(t, path, "READY 9e0c\ntrailing bytes are left unread")
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("no signal from a ready line")
	}
	if hostClosed(first, 100*time.Millisecond) {
		t.Error("the signal's connection was closed; the host holds it")
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("the ready socket after the signal: %v; want it still listening", err)
	}
	second := guestConnect(t, path, "READY 9e0c\n") // after a snapshot's reset
	if !hostClosed(first, 10*time.Second) {
		t.Error("the earlier ready connection was kept beside the new one")
	}
	if hostClosed(second, 100*time.Millisecond) {
		t.Error("the new ready connection was closed; the host holds it")
	}
	r.Close()
	r.Close()
	if !hostClosed(second, 10*time.Second) {
		t.Error("Close left the held connection open")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready socket after Close: %v, want it removed", err)
	}
}

// TestReadyListenerGivesUp: after maxReadyConns connections in a row
// without a ready line, the listener stops (the fallback poll still finds
// the agent), and Close closes the held connection, and one being read.
func TestReadyListenerGivesUp(t *testing.T) {
	savedN := maxReadyConns
	maxReadyConns = 3
	defer func() { maxReadyConns = savedN }()
	path := filepath.Join(t.TempDir(), "vsock.sock_1025")
	r, err := ListenReady(path, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		guestConnect(t, path, "NOPE\n")
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the listener still accepts after its bound")
	}
	if _, err := net.Dial("unix", path); err == nil {
		t.Error("connected after the listener gave up")
	}
	r.Close()

	// Close while a connection is read: it is closed, and Close returns
	// before the line's deadline.
	r, err = ListenReady(path, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	nc := guestConnect(t, path, "REA")
	time.Sleep(50 * time.Millisecond)
	r.Close()
	if !hostClosed(nc, time.Second) {
		t.Error("Close left the connection being read open")
	}
	if signalled(r) {
		t.Error("a closed listener signalled")
	}

	// Close after the signal: the held connection is closed.
	r, err = ListenReady(path, -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	nc = guestConnect(t, path, "READY x\n")
	<-r.Ready()
	r.Close()
	if !hostClosed(nc, 10*time.Second) {
		t.Error("Close left the signal's connection open")
	}
}

// countingVMM is a fake VMM vsock socket that counts CONNECTs: until up
// is set it closes them (the guest refused: nobody listens on the port);
// then it serves an agent. swallow swallows the first one (no answer, not
// closed: a connect the guest lost).
type countingVMM struct {
	connects atomic.Int32
	up       atomic.Bool
	swallow  bool

	mu   sync.Mutex
	held []net.Conn
}

// startCountingVMM starts v with an agent over newFake at a socket of
// its own, and returns the socket's path.
func startCountingVMM(t *testing.T, v *countingVMM) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "vsock.sock")
	srv := agent.NewServer(agent.Config{Interp: newFake(), Software: "test-agent", Logger: quiet()})
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		srv.Close()
		v.mu.Lock()
		for _, c := range v.held {
			c.Close()
		}
		v.mu.Unlock()
	})
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			n := v.connects.Add(1)
			if n == 1 && v.swallow {
				v.mu.Lock()
				v.held = append(v.held, nc)
				v.mu.Unlock()
				continue
			}
			go func() {
				line, err := bufio.NewReader(nc).ReadString('\n')
				if err != nil || line != "CONNECT 1024\n" || !v.up.Load() {
					nc.Close()
					return
				}
				nc.Write([]byte("OK 1073741824\n"))
				srv.ServeConn(nc)
			}()
		}
	}()
	return sock
}

// TestDialSignalledWakesWithoutPolling: the agent comes up 300 ms after
// the dial begins; the signal wakes the dial, which connects exactly once.
// (The polling Dial connects about ten times meanwhile.)
func TestDialSignalledWakesWithoutPolling(t *testing.T) {
	v := &countingVMM{}
	sock := startCountingVMM(t, v)
	ready := make(chan struct{})
	go func() {
		time.Sleep(300 * time.Millisecond)
		v.up.Store(true)
		close(ready)
	}()
	c, err := DialSignalled(ctxT(t), sock, ready, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := v.connects.Load(); n != 1 {
		t.Errorf("%d connects, want exactly 1 (after the signal)", n)
	}
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if n := v.connects.Load(); n != 1 {
		t.Errorf("%d connects after a call, want the dial's one reused", n)
	}
}

// TestDialSignalledFallback: an agent that never signals (a snapshot of
// an older one) is found by the fallback poll, one try per interval.
func TestDialSignalledFallback(t *testing.T) {
	v := &countingVMM{}
	sock := startCountingVMM(t, v)
	go func() {
		for v.connects.Load() < 3 {
			time.Sleep(5 * time.Millisecond)
		}
		v.up.Store(true)
	}()
	c, err := DialSignalled(ctxT(t), sock, nil, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := v.connects.Load(); n < 3 {
		t.Errorf("%d connects, want the fallback's tries until the agent was up (at least 3)", n)
	}

	// No signal, no agent: the deadline's error says so.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	v.up.Store(false)
	if _, err := DialSignalled(ctx, sock, nil, 20*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no signal") {
		t.Errorf("no signal and no agent: %v", err)
	}
}

// TestDialSignalledAbandonsALostTry: a fallback try that the guest lost
// (no answer) is abandoned when the signal arrives, not waited out.
func TestDialSignalledAbandonsALostTry(t *testing.T) {
	v := &countingVMM{swallow: true}
	v.up.Store(true)
	sock := startCountingVMM(t, v)
	ready := make(chan struct{})
	go func() {
		for v.connects.Load() < 1 {
			time.Sleep(5 * time.Millisecond)
		}
		close(ready)
	}()
	// The lost try would hold the dial for AttemptTimeout (20 s); the
	// test's deadline is shorter.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialSignalled(ctx, sock, ready, 10*time.Millisecond)
	if err != nil {
		t.Fatalf("dial with a lost try and then the signal: %v", err)
	}
	c.Close()
	if n := v.connects.Load(); n != 2 {
		t.Errorf("%d connects, want 2 (the lost try, then the signal's)", n)
	}
}

// cancelAtHelloEnd is a connection whose ctx ends exactly as its hello
// completes: when the hello clears its deadline (its last step), it
// cancels and waits until closeOnDone has closed it.
type cancelAtHelloEnd struct {
	net.Conn
	cancel context.CancelFunc
	closed chan struct{}
	once   sync.Once
}

func (c *cancelAtHelloEnd) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.cancel()
		<-c.closed
	}
	return c.Conn.SetDeadline(t)
}

func (c *cancelAtHelloEnd) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// TestTryCancelledAsTheHelloAnswersKeepsNoClosedConnection: a try whose
// ctx ends as the agent answers its hello (a fallback try when the ready
// signal arrives) fails; it never leaves its closed connection in the
// pool, where the next call would write to it ("use of closed network
// connection", seen in the rig).
func TestTryCancelledAsTheHelloAnswersKeepsNoClosedConnection(t *testing.T) {
	plain := serve(t, agent.Config{Interp: newFake()})
	ctx, cancel := context.WithCancel(ctxT(t))
	c := New(func(context.Context) (net.Conn, error) {
		nc, err := plain.dial(ctxT(t))
		if err != nil {
			return nil, err
		}
		return &cancelAtHelloEnd{Conn: nc, cancel: cancel, closed: make(chan struct{})}, nil
	})
	defer c.Close()
	if _, err := c.try(ctx); err == nil {
		t.Fatal("a try whose connection was closed as it answered succeeded")
	}
	c.mu.Lock()
	idle := len(c.idle)
	c.mu.Unlock()
	if idle != 0 {
		t.Fatalf("%d connections in the pool after a cancelled try, want 0", idle)
	}
}
