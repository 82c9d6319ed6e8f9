package engine

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// setReadyFallback sets readyFallback for the test.
func setReadyFallback(t *testing.T, d time.Duration) {
	saved := readyFallback
	readyFallback = d
	t.Cleanup(func() { readyFallback = saved })
}

// inProcessVMM is a fake VMM vsock socket in the test's own process for
// the sandbox in dir: it counts CONNECTs, closes them until up is set (the
// guest's agent is not listening yet), then serves an agent.
type inProcessVMM struct {
	dir      string
	spec     control.Spec
	connects atomic.Int32
	up       atomic.Bool
}

func newInProcessVMM(t *testing.T) *inProcessVMM {
	t.Helper()
	dir, err := os.MkdirTemp("", "rd") // short: sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(runDir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	v := &inProcessVMM{dir: dir, spec: control.Spec{Vsock: &control.Vsock{CID: 3, UDS: filepath.Join(runDir(dir), vsockFile)}}}
	ln, err := net.Listen("unix", v.spec.Vsock.UDS)
	if err != nil {
		t.Fatal(err)
	}
	srv := agent.NewServer(agent.Config{Interp: diesInterp{dying: func() {}}, Software: "fake-agent", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { ln.Close(); srv.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			v.connects.Add(1)
			go func() {
				line, err := bufio.NewReader(nc).ReadString('\n')
				if err != nil || line != "CONNECT 1024\n" || !v.up.Load() {
					nc.Close()
					return
				}
				nc.Write([]byte("OK 1\n"))
				srv.ServeConn(nc)
			}()
		}
	}()
	return v
}

// TestAwaitAgentWokenBySignal: the agent comes up 300 ms after the VMM
// started and announces itself; awaitAgent dials once, on the signal
// (the polling dial connects about ten times meanwhile); the VMM process
// keeps the listener, with the signal's connection, until it exits.
func TestAwaitAgentWokenBySignal(t *testing.T) {
	setReadyFallback(t, time.Hour) // only the signal can wake it
	v := newInProcessVMM(t)
	ready, err := listenReady(&v.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	path := filepath.Join(runDir(v.dir), vsockFile+"_1025")
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("no ready socket at %s before the VMM starts: %v", path, err)
	}
	guest := make(chan net.Conn, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		v.up.Store(true)
		nc, err := net.Dial("unix", path)
		if err != nil {
			t.Errorf("announce: %v", err)
			close(guest)
			return
		}
		io.WriteString(nc, "READY 1\n")
		guest <- nc
	}()
	p := &vmProc{done: make(chan struct{})}
	c, err := awaitAgent(context.Background(), p, v.dir, 30*time.Second, "booting", ready)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := v.connects.Load(); n != 1 {
		t.Errorf("%d connects to the agent, want exactly 1 (on the signal)", n)
	}
	nc := <-guest
	if nc == nil {
		return
	}
	defer nc.Close()
	p.keepReady(ready) // startVMM's: the listener is p's for the VM's life
	if fi, err := os.Stat(path); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the ready socket after the signal: %v; want it listening while the VM runs", err)
	}
	nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := nc.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("the ready connection ended (%v) while the VMM runs", err)
	}
	p.exit(nil)
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the ready connection after the VMM exited: %v, want EOF", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the ready socket after the VMM exited: %v, want it removed", err)
	}
	p.keepReady(&net.UnixConn{}) // after the exit: closed at once, not kept
	if p.ready != nil {
		t.Error("a ready connection was kept by an exited VMM")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestAwaitAgentFallback: an agent that never signals (a snapshot of an
// older one) is still found, by the slow poll.
func TestAwaitAgentFallback(t *testing.T) {
	setReadyFallback(t, 20*time.Millisecond)
	v := newInProcessVMM(t)
	ready, err := listenReady(&v.spec)
	if err != nil {
		t.Fatal(err)
	}
	defer ready.Close()
	go func() {
		for v.connects.Load() < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		v.up.Store(true)
	}()
	p := &vmProc{done: make(chan struct{})}
	c, err := awaitAgent(context.Background(), p, v.dir, 30*time.Second, "booting", ready)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if n := v.connects.Load(); n < 3 {
		t.Errorf("%d connects, want the poll's tries (at least 3)", n)
	}
}

// TestReadyPathOfAJailedVMM: a jailed VMM dials "<its uds>_1025" in its
// jail's /run, which is the sandbox's run directory: the daemon listens
// there, on a socket owned by the jail's user (who connects after the VMM
// drops root) and closed to others. A jail that binds no writable
// directory there is refused.
func TestReadyPathOfAJailedVMM(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(runDir(dir), 0o755)
	spec := control.Spec{Vsock: &control.Vsock{CID: 7, UDS: filepath.Join(jailRunDir, vsockFile)}, Jail: &jail.Spec{
		UID: 60007, GID: 60007, Binds: []jail.Bind{{Source: "/k", Target: jailKernel}, {Source: runDir(dir), Target: jailRunDir, Writable: true}}}}
	path, err := readyPath(&spec)
	if want := filepath.Join(runDir(dir), vsockFile) + "_1025"; err != nil || path != want {
		t.Fatalf("ready path %q, %v; want %q", path, err, want)
	}
	r, err := listenReady(&spec)
	if os.Geteuid() != 0 {
		if err == nil {
			r.Close()
		}
		t.Skip("chown to the jail's user needs root")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 60007 || st.Gid != 60007 || fi.Mode().Perm() != 0o600 {
		t.Errorf("the ready socket: owner %d:%d mode %v, want 60007:60007 0600", st.Uid, st.Gid, fi.Mode().Perm())
	}
	spec.Jail.Binds[1].Writable = false
	if _, err := readyPath(&spec); err == nil {
		t.Error("a ready path through a read-only bind")
	}
	if r, err := listenReady(&control.Spec{}); r != nil || err != nil {
		t.Errorf("a spec without vsock: %v, %v; want no listener", r, err)
	}
}

// TestStartsAreSignalled: through the manager and its fake VMMs (whose
// guest runs the agent's Announcer), a create and a resume are each woken
// by the signal (the poll would take an hour), the running sandbox keeps
// one ready socket, and none is left behind; an agent that never signals is found by the poll.
func TestStartsAreSignalled(t *testing.T) {
	setReadyFallback(t, time.Hour)
	m, state := newPausableManager(t, nil)
	var logs lockedBuffer
	m.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	cellText(t, m, info.ID, "x = 1")
	if n := strings.Count(logs.String(), "signalled=true"); n != 2 {
		t.Errorf("%d signalled starts, want 2 (create, resume):\n%s", n, logs.String())
	}
	if live, _ := filepath.Glob(filepath.Join(state, "sandboxes", "*", "run", "*_1025")); len(live) != 1 {
		t.Errorf("ready sockets of the running sandbox: %v, want its one, listening for its life", live)
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "sandboxes", "*", "run", "*_1025")); len(left) != 0 {
		t.Errorf("ready sockets left: %v", left)
	}
	assertNothingLeft(t, m, state)

	t.Setenv(envNoReady, "1")
	setReadyFallback(t, 50*time.Millisecond)
	info, err = m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatalf("create with an agent that never signals: %v", err)
	}
	if !strings.Contains(logs.String(), "signalled=false") {
		t.Errorf("the unsignalled start is not logged as such:\n%s", logs.String())
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, m, state)
}

// TestLogFieldsReadsQuotedValues: the rig tests' log reader takes a
// quoted value with escaped quotes whole (the slow-start line quotes the
// VMM's log, whose own msg= must not replace the line's).
func TestLogFieldsReadsQuotedValues(t *testing.T) {
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("the VM's agent answered", "signalled", true,
		"vmm_log", "time=x level=INFO msg=\"vmm jailed\" uid=1\nmsg=\"other\"")
	f := logFields(strings.TrimSpace(b.String()))
	if f["msg"] != "the VM's agent answered" || f["signalled"] != "true" || !strings.Contains(f["vmm_log"], `msg="vmm jailed"`) {
		t.Errorf("fields %q", f)
	}
}
