package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// TestLostInfo: the cause comes from the wait status when a signal killed
// the VMM (whatever report it may have left), and from its End report
// when it exited; a VMM that exited without one says so.
func TestLostInfo(t *testing.T) {
	run := func(script string) error { return exec.Command("sh", "-c", script).Run() }
	triple := &control.End{Reason: control.ReasonTripleFault, Error: vmm.ErrTripleFault.Error()}
	if got := lostInfo(run("kill -SYS $$"), nil); got.KilledBy != "seccomp" || !strings.Contains(got.Exit, "bad system call") {
		t.Errorf("SIGSYS: %+v", got)
	}
	if got := lostInfo(run("kill -KILL $$"), triple); got.KilledBy != "signal" || !strings.Contains(got.Reason, "OOM") || strings.Contains(got.Reason, "triple") {
		t.Errorf("SIGKILL after a report: %+v", got)
	}
	if got := lostInfo(run("exit 1"), triple); got.KilledBy != "" || got.Exit != "exit status 1" || got.Reason != "the VM ended: guest triple-faulted (KVM_EXIT_SHUTDOWN)" {
		t.Errorf("exit 1 after a triple fault: %+v", got)
	}
	if got := lostInfo(run("exit 0"), &control.End{Reason: control.ReasonGuestReset}); got.Reason != "the VM ended: the guest reset" {
		t.Errorf("clean end: %+v", got)
	}
	if got := lostInfo(run("exit 2"), nil); got.Exit != "exit status 2" || !strings.Contains(got.Reason, "without an end report") {
		t.Errorf("no report: %+v", got)
	}
	if got := lostInfo(errAdoptedExited, triple); !strings.Contains(got.Exit, "adopted") || !strings.Contains(got.Reason, "triple") {
		t.Errorf("an adopted VMM's report: %+v", got)
	}
}

// fakeEndingVMM is the test binary's role as a VMM whose guest ends the
// ways a real one can, on the cell that asks: "triple fault" writes the
// End report the VMM writes for one and exits 1; "forbidden call"
// installs the jail's seccomp filter and makes a call it forbids (the
// kernel kills the process with SIGSYS). A kill -9 is the test's.
func fakeEndingVMM(args []string) int {
	_, files, ln, err := fakeVMMStart(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake vmm:", err)
		return 1
	}
	var mu sync.Mutex
	var conns []net.Conn
	dying := func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
	srv := agent.NewServer(agent.Config{Interp: endingInterp{diesInterp{dying: dying}, files[control.SlotEnd]},
		Software: "fake-agent", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), NewMachine: fakeNewMachine})
	fmt.Println("fake guest: booted")
	return fakeVMMServe(ln, func(nc net.Conn) {
		mu.Lock()
		conns = append(conns, nc)
		mu.Unlock()
		srv.ServeConn(nc)
	})
}

type endingInterp struct {
	diesInterp
	end *os.File // the End report's slot
}

func (e endingInterp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	switch code {
	case "triple fault":
		e.dying()
		if err := control.WriteEnd(e.end, control.End{Reason: control.ReasonTripleFault, Error: vmm.ErrTripleFault.Error()}); err != nil {
			fmt.Fprintln(os.Stderr, "fake vmm: end report:", err)
		}
		os.Exit(1)
	case "forbidden call":
		if err := jail.Install(); err != nil {
			return cell.Result{}, fmt.Errorf("no seccomp here: %w", err)
		}
		jail.ForbiddenSyscall()
	}
	return e.diesInterp.Run(ctx, code, timeout, onEvent)
}

// TestLostSandboxSaysWhy: a sandbox whose VMM is killed by its seccomp
// filter, whose guest triple-faults, or whose VMM is killed with SIGKILL
// reads lost with that cause: from the wait status for the two signals,
// from the End report for the triple fault. No log text is read for it.
func TestLostSandboxSaysWhy(t *testing.T) {
	m, _, _ := newRoleManager(t, "ending", nil)
	ctx := context.Background()
	lose := func(how string) *sandbox.LostInfo {
		t.Helper()
		info, err := m.Create(ctx, sandbox.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Delete(ctx, info.ID)
		if how == "kill -9" {
			rec, err := readProcRecord(m.sandboxDir(info.ID))
			pid := rec.PID
			if err != nil {
				t.Fatalf("the VMM's record: %+v %v", rec, err)
			}
			syscall.Kill(pid, syscall.SIGKILL)
		} else if r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: how, Timeout: time.Minute}, nil); err != nil && !errors.Is(err, sandbox.ErrLost) || err == nil && r.Status != cell.StatusLost {
			t.Fatalf("%s: cell %+v, %v; want the sandbox lost", how, r, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			got, err := m.Get(ctx, info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == sandbox.StateLost {
				return got.Lost
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: the sandbox did not read lost", how)
		return nil
	}
	if why := lose("forbidden call"); why == nil || why.KilledBy != "seccomp" || !strings.Contains(why.Exit, "bad system call") {
		t.Errorf("seccomp: lost %+v", why)
	}
	if why := lose("triple fault"); why == nil || why.KilledBy != "" || why.Exit != "exit status 1" ||
		why.Reason != "the VM ended: guest triple-faulted (KVM_EXIT_SHUTDOWN)" {
		t.Errorf("triple fault: lost %+v", why)
	}
	if why := lose("kill -9"); why == nil || why.KilledBy != "signal" || why.Exit != "killed by killed" {
		t.Errorf("kill -9: lost %+v", why)
	}
}
