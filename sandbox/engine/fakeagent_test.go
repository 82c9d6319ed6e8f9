package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/process"
)

// fakeAgentVMM is the test binary's role as `cellvm vmm --config PATH` with
// no KVM: it serves a real agent on the spec's vsock socket (Firecracker's
// CONNECT handshake included) over diesInterp. It returns the exit code.
func fakeAgentVMM(args []string) int {
	spec, files, ln, err := fakeVMMStart(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm:", err)
		return 1
	}
	if spec.Restore != nil {
		if err := fakeRestore(files); err != nil {
			fmt.Fprintln(os.Stderr, "fake vmm: restore:", err)
			return 1
		}
		fmt.Println("fake guest: restored") // the console
	} else {
		fmt.Println("fake guest: booted") // the console
	}
	if spec.Control != "" {
		if err := fakeControl(spec.Control); err != nil {
			fmt.Fprintln(os.Stderr, "fake vmm: control socket:", err)
			return 1
		}
	}
	var mu sync.Mutex
	var conns []net.Conn
	dying := func() { // the agent dies first; the kernel panics a second later
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
	srv := agent.NewServer(agent.Config{Interp: &envInterp{diesInterp: diesInterp{dying: dying}, restored: spec.Restore != nil},
		Software: "fake-agent", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NewMachine: fakeNewMachine,
		OnShutdown: func() { os.Exit(0) }})
	return fakeVMMServe(ln, func(nc net.Conn) {
		mu.Lock()
		conns = append(conns, nc)
		mu.Unlock()
		srv.ServeConn(nc)
	})
}

// fakeVMMStart reads the spec of `cellvm vmm --config PATH` as the VMM
// does (control.Load: its files by slot) and listens on its vsock socket.
func fakeVMMStart(args []string) (control.Spec, control.Files, net.Listener, error) {
	if len(args) < 1 || args[0] != control.Command {
		return control.Spec{}, nil, nil, fmt.Errorf("unexpected arguments %q", args)
	}
	path, pooled, err := control.ParseArgs(args[1:])
	if err != nil {
		return control.Spec{}, nil, nil, err
	}
	var spec control.Spec
	var files control.Files
	if pooled {
		// The VMM pool's process (vmmpool.go): its claim brings what
		// --config would have, and its console and log.
		spec, files, _, err = process.Claimed()
		if errors.Is(err, control.ErrUnclaimed) {
			os.Exit(0)
		}
	} else {
		spec, files, err = control.Load(path)
	}
	if err != nil {
		return spec, nil, nil, err
	}
	if spec.Vsock == nil {
		return spec, nil, nil, fmt.Errorf("a spec without vsock")
	}
	ln, err := net.Listen("unix", spec.Vsock.UDS)
	if err == nil && os.Getenv(envNoReady) == "" {
		fakeAnnounce(spec.Vsock.UDS)
	}
	return spec, files, ln, err
}

// envNoReady set keeps a fake VMM's guest from announcing itself, as an
// older agent's does not.
const envNoReady = "CELLVM_TEST_NO_READY"

// fakeAnnounce runs the agent's Announcer in the fake VMM as the real
// VMM carries it: connects to "<uds>_<ReadyPort>".
func fakeAnnounce(uds string) {
	a := &agent.Announcer{Line: "READY fake\n", Dial: func() (net.Conn, error) {
		return net.Dial("unix", uds+"_"+strconv.Itoa(proto.ReadyPort))
	}}
	go a.Run(context.Background())
}

// fakeVMMServe accepts host connections on ln, does Firecracker's CONNECT
// handshake and hands each to serve, until ln fails.
func fakeVMMServe(ln net.Listener, serve func(net.Conn)) int {
	for {
		nc, err := ln.Accept()
		if err != nil {
			return 1
		}
		go func() {
			r := bufio.NewReader(nc)
			if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "CONNECT ") {
				nc.Close()
				return
			}
			nc.Write([]byte("OK 1\n"))
			serve(nc)
		}()
	}
}

// diesInterp answers "1 + 1" with 2; any other cell brings the whole
// fake VM down as a real one goes when the OOM killer takes its init: the
// agent's connections end, and the VMM exits a second later (panic=1).
type diesInterp struct{ dying func() }

func (d diesInterp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	if code == "1 + 1" {
		return cell.Result{Status: cell.StatusOK, Results: []cell.Display{{Main: true, Data: map[string]string{"text/plain": "2"}}}}, nil
	}
	fmt.Println("fake guest: Kernel panic - not syncing: the cell killed the VM")
	d.dying()
	time.Sleep(time.Second)
	os.Exit(3)
	return cell.Result{}, nil
}
func (diesInterp) Interrupt() bool { return false }
func (diesInterp) Restart() error  { return nil }
func (diesInterp) Exec(context.Context, []string, io.Reader, time.Duration) (cell.ExecResult, error) {
	return cell.ExecResult{}, errors.New("no exec in the fake VM")
}

// TestVMThatDiesDuringACellIsLost: the cell's result says the sandbox was
// lost (not a bare transport error), the sandbox says lost, the log says
// why with the console's end, and deleting it leaves nothing.
func TestVMThatDiesDuringACellIsLost(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_VMM", "agent")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, state := newFakeManager(t, exe, 30*time.Second)
	var logs lockedBuffer
	m.log = slog.New(slog.NewTextHandler(&logs, nil))
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil)
	if err != nil || r.Status != cell.StatusOK {
		t.Fatalf("first cell: %+v, %v", r, err)
	}
	r, err = m.RunCell(ctx, info.ID, sandbox.Cell{Code: "crash()", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatalf("cell that kills the VM: error %v, want a result with status lost", err)
	}
	if r.Status != cell.StatusLost || r.StateKept {
		t.Errorf("cell that kills the VM: status %s state_kept %v, want lost and false", r.Status, r.StateKept)
	}
	got, err := m.Get(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != sandbox.StateLost {
		t.Errorf("sandbox state %s after its VM died, want %s", got.State, sandbox.StateLost)
	}
	if _, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("cell on a lost sandbox: %v, want ErrLost", err)
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "sandbox lost"); n != 1 {
		t.Errorf("logged 'sandbox lost' %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "Kernel panic") {
		t.Errorf("the lost log lacks the console's end:\n%s", logs.String())
	}
	assertNothingLeft(t, m, state)
}

// lockedBuffer is a log sink safe to read while the manager's goroutines
// write to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
