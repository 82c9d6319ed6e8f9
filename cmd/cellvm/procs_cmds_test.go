package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/sandbox"
)

// TestProcessCommands: exec -d, ps, kill and exec -i against the fake
// daemon.
func TestProcessCommands(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	r := d.cellvm(t, "exec", "-d", id, "--", "sleep", "60")
	pid := strings.TrimSpace(r.stdout)
	if r.code != 0 || pid == "" || pid == "0" {
		t.Fatalf("exec -d: %+v", r)
	}
	r = d.cellvm(t, "ps", id)
	if r.code != 0 || !strings.Contains(r.stdout, "PID") || !strings.Contains(r.stdout, pid+" ") || !strings.Contains(r.stdout, "sleep 60") {
		t.Fatalf("ps: %+v", r)
	}
	r = d.cellvm(t, "ps", id, "--json")
	var list []sandbox.ProcessInfo
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("ps --json: %+v %v", r, err)
	}
	for _, step := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"kill", id, "abc"}, exitUsage, "not a process id"},
		{[]string{"kill", id, pid, "-s", "STOP"}, exitUsage, "use TERM"},
		{[]string{"kill", id, pid, "-s", "KILL"}, 0, ""},
		{[]string{"kill", id, pid}, exitError, "not_found"},
		{[]string{"ps", id}, 0, "PID"},
		{[]string{"exec", "-d", id, "--", "nosuch"}, 127, "no such file"},
		{[]string{"exec", "-d", "-i", id, "--", "cat"}, exitUsage, "takes no -i or -t"},
		{[]string{"exec", "-d", id, "--", "fail"}, 0, ""},
		{[]string{"ps", "sb-none"}, exitError, "not_found"},
	} {
		r := d.cellvm(t, step.args...)
		if r.code != step.exit || !strings.Contains(r.stdout+r.stderr, step.want) {
			t.Errorf("cellvm %v: exit %d, stdout %q, stderr %q; want exit %d and %q", step.args, r.code, r.stdout, r.stderr, step.exit, step.want)
		}
	}
	if r := d.cellvm(t, "ps", id); strings.Contains(r.stdout, "sleep") {
		t.Errorf("ps after kill: %q", r.stdout)
	}
	// exec -i passes stdin on and closes it at its end; the exit status
	// is the process's.
	r = cellvmEnv(t, []string{"CELLVM_SOCKET=" + d.socket}, "hello\nworld\n", "exec", "-i", id, "--", "cat")
	if r.code != 0 || r.stdout != "hello\nworld\n" {
		t.Fatalf("exec -i cat: %+v", r)
	}
	r = d.cellvm(t, "exec", "-i", id, "--", "fail")
	if r.code != 1 || r.stderr != "failed\n" {
		t.Fatalf("exec -i fail: %+v", r)
	}
}

// openTestPTY opens a terminal pair for the CLI under test.
func openTestPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, m.Fd(), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		t.Skipf("TIOCGPTPEER: %v", errno)
	}
	return m, os.NewFile(sfd, "pts")
}

// TestExecInteractiveTerminal: `cellvm exec -it` on a terminal puts it in
// raw mode, passes keys on, resizes the sandbox's terminal when its own
// is resized (SIGWINCH), and gives the terminal back as it found it.
func TestExecInteractiveTerminal(t *testing.T) {
	d := startFakeDaemon(t)
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	master, slave := openTestPTY(t)
	defer master.Close()
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 100, Row: 30}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "exec", "-it", id, "--", "bash")
	cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_URL=", "CELLVM_SOCKET="+d.socket)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	defer cmd.Process.Kill()
	var mu sync.Mutex
	var out bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	waitOut := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			s := out.String()
			mu.Unlock()
			if strings.Contains(s, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the terminal's output %q", want, s)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitOut("$ ")
	// Raw: the local terminal echoes nothing and keeps ^C; the sandbox's
	// terminal does the echo.
	tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("the terminal is not raw: lflag %#x", tio.Lflag)
	}
	master.Write([]byte("echo hi\r"))
	waitOut("echo hi")
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: 120, Row: 40}); err != nil {
		t.Fatal(err)
	}
	waitOut("resized 120x40")
	master.Write([]byte("exit\r"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exec -it: %v; output %q", err, out.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("exec -it did not end after exit")
	}
	tio, err = unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if tio.Lflag&unix.ECHO == 0 || tio.Lflag&unix.ICANON == 0 {
		t.Errorf("the terminal was not given back: lflag %#x", tio.Lflag)
	}
}
