package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestDaemonProcesses: background processes and a terminal through the
// real daemon and guest, on one sandbox: a sleep started in the
// background runs as the cell user in a cgroup of its own, is listed,
// and killed; a timeout kills one; a shell on a terminal echoes.
func TestDaemonProcesses(t *testing.T) {
	kvmtest.Require(t)
	d := startDaemon(t, t.TempDir())
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	info, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	defer c.Delete(context.Background(), id)

	hangUp := errors.New("hang up")
	pid := 0
	_, err = c.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"sleep", "300"}, Tag: "bg"}, func(e sandbox.ProcessEvent) error {
		pid = e.PID
		return hangUp
	})
	if !errors.Is(err, hangUp) || pid == 0 {
		t.Fatalf("background start: pid %d, %v", pid, err)
	}
	list, err := c.ListProcesses(ctx, id)
	if err != nil || len(list) != 1 || list[0].PID != pid || list[0].Tag != "bg" {
		t.Fatalf("list %+v, %v", list, err)
	}
	p := strconv.Itoa(pid)
	r, err := c.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"sh", "-c", "stat -c %u /proc/" + p + "; cat /proc/" + p + "/cgroup"}, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.SplitN(r.Stdout, "\n", 2); len(lines) < 2 || lines[0] == "0" || lines[0] == "" || !strings.Contains(lines[1], "/proc-") {
		t.Errorf("the process's uid and cgroup: %q (stderr %q); want the cell user's and a proc- cgroup", r.Stdout, r.Stderr)
	}
	if err := c.SignalProcess(ctx, id, pid, sandbox.SignalKill); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list, err := c.ListProcesses(ctx, id)
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still listed after SIGKILL: %+v, %v", list, err)
		}
	}

	exit, err := c.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"sleep", "300"}, Timeout: time.Second}, nil)
	if err != nil || !exit.TimedOut || exit.Signal != sandbox.SignalKill {
		t.Errorf("a timed-out process: %+v, %v", exit, err)
	}
	if _, err := c.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"id"}, User: sandbox.GuestUserRoot}, nil); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("root in a sandbox without root: %v", err)
	}

	// A shell on a terminal.
	var mu sync.Mutex
	var out strings.Builder
	shell := make(chan int, 1)
	done := make(chan sandbox.ProcessExit, 1)
	go func() {
		exit, err := c.StartProcess(ctx, id, sandbox.ProcessRequest{Argv: []string{"/bin/sh"}, PTY: &sandbox.PTYSize{Cols: 90, Rows: 30}}, func(e sandbox.ProcessEvent) error {
			if e.Kind == sandbox.ProcessStart {
				shell <- e.PID
			}
			mu.Lock()
			out.Write(e.Data)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Error(err)
		}
		done <- exit
	}()
	sh := <-shell
	if err := c.SendInput(ctx, id, sh, []byte("tty; stty size; echo he''llo; exit 3\n"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case exit := <-done:
		mu.Lock()
		s := out.String()
		mu.Unlock()
		if exit.ExitCode != 3 || !strings.Contains(s, "hello") || !strings.Contains(s, "/dev/pts/") || !strings.Contains(s, "30 90") {
			t.Errorf("the shell: exit %+v, terminal %q", exit, s)
		}
	case <-time.After(time.Minute):
		t.Fatal("the shell did not exit")
	}
}
