package engine

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// TestProcessesThroughTheFakeAgent: the process methods over a real agent
// (the fake VMM's, whose processes are the test host's): a stream's
// events and exit, a process that outlives its stream, list, attach,
// signal, a terminal, and the host's own refusals.
func TestProcessesThroughTheFakeAgent(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_VMM", "agent")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newFakeManager(t, exe, 30*time.Second)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	id := info.ID

	var mu sync.Mutex
	var kinds []string
	var out strings.Builder
	collect := func(e sandbox.ProcessEvent) error {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, e.Kind)
		out.Write(e.Data)
		return nil
	}
	exit, err := m.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"/bin/sh", "-c", "echo $GREETING; exit 4"}, Env: map[string]string{"GREETING": "hi"}}, collect)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 4 || out.String() != "hi\n" || kinds[0] != sandbox.ProcessStart || kinds[len(kinds)-1] != sandbox.ProcessEnd {
		t.Fatalf("exit %+v out %q kinds %v", exit, out.String(), kinds)
	}

	// A background process: the stream hangs up at its start.
	hangUp := errors.New("hang up")
	pid := 0
	_, err = m.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"sleep", "60"}, Tag: "bg"}, func(e sandbox.ProcessEvent) error {
		pid = e.PID
		return hangUp
	})
	if !errors.Is(err, hangUp) || pid == 0 {
		t.Fatalf("err %v pid %d", err, pid)
	}
	list, err := m.ListProcesses(ctx, id)
	if err != nil || len(list) != 1 || list[0].PID != pid || list[0].Tag != "bg" || list[0].User != sandbox.GuestUserCell {
		t.Fatalf("list %+v err %v", list, err)
	}
	done := make(chan sandbox.ProcessExit, 1)
	go func() {
		exit, err := m.AttachProcess(ctx, id, pid, nil)
		if err != nil {
			t.Error(err)
		}
		done <- exit
	}()
	time.Sleep(100 * time.Millisecond)
	if err := m.SignalProcess(ctx, id, pid, sandbox.SignalKill); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-done:
		if exit.Signal != sandbox.SignalKill {
			t.Fatalf("exit %+v", exit)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("attach did not end")
	}
	if err := m.SignalProcess(ctx, id, pid, sandbox.SignalKill); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("signal an ended process: %v", err)
	}
	if _, err := m.AttachProcess(ctx, id, pid, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("attach an ended process: %v", err)
	}

	// A terminal.
	var pty strings.Builder
	seen := make(chan struct{}, 100)
	done2 := make(chan sandbox.ProcessExit, 1)
	ptyPID := make(chan int, 1)
	go func() {
		exit, err := m.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"/bin/sh"}, PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}}, func(e sandbox.ProcessEvent) error {
			mu.Lock()
			defer mu.Unlock()
			if e.Kind == sandbox.ProcessStart {
				ptyPID <- e.PID
			}
			pty.Write(e.Data)
			seen <- struct{}{}
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		done2 <- exit
	}()
	p := <-ptyPID
	if err := m.ResizePTY(ctx, id, p, sandbox.PTYSize{Cols: 90, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	if err := m.SendInput(ctx, id, p, []byte("stty size; echo ab''cd\n"), false); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		mu.Lock()
		s := pty.String()
		mu.Unlock()
		if strings.Contains(s, "abcd") && strings.Contains(s, "30 90") {
			break
		}
		select {
		case <-seen:
		case <-deadline:
			t.Fatalf("terminal output %q", s)
		}
	}
	if err := m.SendInput(ctx, id, p, nil, true); err != nil {
		t.Fatal(err)
	}
	if exit := <-done2; exit.ExitCode != 0 {
		t.Fatalf("shell exit %+v", exit)
	}

	// The host's refusals.
	if _, err := m.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"id"}, User: sandbox.GuestUserRoot}, nil); !errors.Is(err, sandbox.ErrForbidden) {
		t.Fatalf("root in a sandbox without root: %v", err)
	}
	if _, err := m.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"id"}, Cwd: "tmp"}, nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("a relative cwd: %v", err)
	}
	if _, err := m.StartProcess(ctx, "sb-nope", sandbox.ProcessRequest{Argv: []string{"id"}}, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("an unknown sandbox: %v", err)
	}
	if err := m.SignalProcess(ctx, id, 1, "SIGSTOP"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("SIGSTOP: %v", err)
	}
	exit, err = m.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"/no/such"}}, nil)
	if err != nil || exit.Error == "" {
		t.Fatalf("a missing program: %+v %v", exit, err)
	}
}

// TestAWatchedProcessDoesNotHoldOffAPause: a stream holds the sandbox
// only until its process runs; a background server watched for hours
// must not keep its sandbox from pausing (E2B's pause with a background
// command's handle open was refused, and the SDK read the 409 as
// "already paused").
func TestAWatchedProcessDoesNotHoldOffAPause(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_VMM", "agent")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newFakeManager(t, exe, 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(context.Background(), info.ID)
	started := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		_, err := m.StartProcess(ctx, info.ID, sandbox.ProcessRequest{Argv: []string{"sleep", "60"}}, func(e sandbox.ProcessEvent) error {
			if e.Kind == sandbox.ProcessStart {
				started <- e.PID
			}
			return nil
		})
		done <- err
	}()
	var pid int
	select {
	case pid = <-started:
	case err := <-done:
		t.Fatalf("the stream ended before its start: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no start event")
	}
	m.mu.Lock()
	s := m.sandboxes[info.ID]
	m.mu.Unlock()
	if s.lc.held() {
		t.Error("a watched process still holds its sandbox after its start: a pause would be refused")
	}
	select {
	case err := <-done:
		t.Fatalf("the stream ended while its process runs: %v", err)
	default:
	}
	if err := m.SignalProcess(context.Background(), info.ID, pid, sandbox.SignalKill); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the stream of a killed process: %v", err)
	}
}
