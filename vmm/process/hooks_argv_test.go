package process

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const envArgvChild = "CELLVM_TEST_ARGV_HOOK_CHILD"

// TestArgvHookChild is the child of TestArgvHookRewritesCmdline: it arms
// the hook, says so, and waits to be killed.
func TestArgvHookChild(t *testing.T) {
	if os.Getenv(envArgvChild) != "1" {
		t.Skip("the child of TestArgvHookRewritesCmdline")
	}
	rewriteArgvOnSIGWINCH(slog.New(slog.NewTextHandler(io.Discard, nil)))
	fmt.Println("armed")
	time.Sleep(time.Minute)
}

// TestArgvHookRewritesCmdline: SIGWINCH to a process with the hook armed
// changes what /proc/PID/cmdline says of it, and it keeps running.
func TestArgvHookRewritesCmdline(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestArgvHookChild$", "--", "--config", "/state/sb-x/vmm.json")
	cmd.Env = append(os.Environ(), envArgvChild+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "armed\n" {
		t.Fatalf("the child: %q, %v", line, err)
	}
	cmdline := func() string {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
		return string(b)
	}
	before := cmdline()
	if !strings.Contains(before, "/state/sb-x/vmm.json") {
		t.Fatalf("the child's cmdline before the signal: %q", before)
	}
	cmd.Process.Signal(syscall.SIGWINCH)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if after := cmdline(); after != before {
			if strings.Contains(after, "vmm.json") || strings.Trim(after, "x\x00") != "" {
				t.Errorf("the child's cmdline after the hook: %q", after)
			}
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				t.Errorf("the child after the hook: %v", err)
			}
			return
		}
	}
	t.Fatalf("the child's cmdline is unchanged after SIGWINCH: %q", cmdline())
}
