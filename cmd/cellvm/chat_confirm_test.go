package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/agent/modeltest"
)

// openPTY opens a pseudo-terminal pair: the test holds the master, the
// command gets the slave as its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Fatalf("unlock the pty: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Fatalf("pty number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Fatalf("open the pty's slave: %v", err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// confirmChat runs `cellvm chat --confirm` on a terminal against the fake
// daemon and the model server, types each answer when the prompt shows,
// and returns what the terminal showed.
func confirmChat(t *testing.T, d *fakeDaemon, modelURL string, typed ...string) string {
	t.Helper()
	master, slave := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "chat", "--confirm", "--provider", "openai", "--tools=false", "what does ls show?")
	cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_SOCKET="+d.socket, "CELLVM_URL=",
		"OPENAI_BASE_URL="+modelURL+"/v1", "OPENAI_API_KEY=test", "EDITOR=", "VISUAL=")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	screen := &lockedBuffer{}
	copied := make(chan struct{})
	go func() { io.Copy(screen, master); close(copied) }() // EIO once the command has exited
	const prompt = "?? run this cell? [y]es, [n]o (the model is told), [e]dit: "
	for i, answer := range typed {
		for strings.Count(screen.String(), prompt) <= i {
			if ctx.Err() != nil {
				t.Fatalf("no prompt %d; the terminal shows:\n%s", i+1, screen.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		master.Write([]byte(answer + "\r"))
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("cellvm chat --confirm: %v; the terminal shows:\n%s", err, screen.String())
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second):
		t.Errorf("the terminal's output did not end after the command exited")
	}
	return screen.String()
}

// cellRequests counts the cells the fake daemon was asked to run.
func (d *fakeDaemon) cellRequests() int {
	return strings.Count(d.log.String(), "/cells status=")
}

const confirmCode = "import os\nanswer = 42\nanswer"

func confirmScript() modeltest.Script {
	args, _ := json.Marshal(map[string]string{"code": confirmCode})
	return modeltest.Script{
		{Text: "I'll run some code.", Calls: []modeltest.Call{{ID: "call_ls", Name: "run_python", Args: string(args)}}},
		{Text: "All done."},
	}
}

// lastResult is the tool result the model got in its last request.
func lastResult(t *testing.T, fm *modeltest.Server) modeltest.WireResult {
	t.Helper()
	reqs := fm.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the model got %d requests, want 2", len(reqs))
	}
	turns := reqs[1].Turns
	for i := len(turns) - 1; i >= 0; i-- {
		if rs := turns[i].Results; len(rs) > 0 {
			return rs[len(rs)-1]
		}
	}
	t.Fatalf("the model's second request holds no tool result: %+v", turns)
	return modeltest.WireResult{}
}

// Typing n at the prompt refuses the cell: the model gets the refusal as
// the call's result and the sandbox runs nothing.
func TestChatConfirmRefused(t *testing.T) {
	d := startFakeDaemon(t)
	fm := modeltest.New(confirmScript())
	srv := fm.Start()
	defer srv.Close()
	screen := confirmChat(t, d, srv.URL, "n")
	if !strings.Contains(screen, "answer = 42") {
		t.Errorf("the terminal did not show the cell's code before asking:\n%s", screen)
	}
	r := lastResult(t, fm)
	if r.ID != "call_ls" || !strings.Contains(r.Text, "The user refused to run this code") {
		t.Errorf("the model got %+v, want the refusal for call_ls", r)
	}
	if n := d.cellRequests(); n != 0 {
		t.Errorf("the daemon ran %d cells after a refusal", n)
	}
	if !strings.Contains(screen, "All done.") {
		t.Errorf("the model's answer is missing:\n%s", screen)
	}
	for _, v := range fm.Violations() {
		t.Errorf("wire-format violation: %s", v)
	}
}

// Typing y runs the cell, and the model gets its result.
func TestChatConfirmAllowed(t *testing.T) {
	d := startFakeDaemon(t)
	fm := modeltest.New(confirmScript())
	srv := fm.Start()
	defer srv.Close()
	confirmChat(t, d, srv.URL, "what?", "y")
	r := lastResult(t, fm)
	if r.ID != "call_ls" || r.IsError || !strings.Contains(r.Text, "42") {
		t.Errorf("the model got %+v, want the cell's value 42", r)
	}
	if n := d.cellRequests(); n != 1 {
		t.Errorf("the daemon ran %d cells, want 1", n)
	}
}

// Typing e reads the replacement from the terminal (no $EDITOR), shows
// it, asks again, and the edited code is what runs.
func TestChatConfirmEdited(t *testing.T) {
	d := startFakeDaemon(t)
	fm := modeltest.New(confirmScript())
	srv := fm.Start()
	defer srv.Close()
	screen := confirmChat(t, d, srv.URL, "e\rb = 7\rb\r.", "y")
	if !strings.Contains(screen, "the cell is now:") {
		t.Errorf("the edited cell was not shown:\n%s", screen)
	}
	r := lastResult(t, fm)
	if !strings.Contains(r.Text, "[The user edited this code before it ran. What ran:]\nb = 7\nb") || !strings.Contains(r.Text, "7") {
		t.Errorf("the model got %+v, want the edit and its result", r)
	}
	if n := d.cellRequests(); n != 1 {
		t.Errorf("the daemon ran %d cells, want 1", n)
	}
}
