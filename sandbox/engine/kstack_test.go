package engine

import (
	"os"
	"strings"
	"testing"
)

func TestStackFrames(t *testing.T) {
	text := "[<0>] rwsem_down_read_slowpath+0x2a1/0x4d0\n[<0>] copy_net_ns+0x10a/0x2c0\n[<0>] create_new_namespaces+0x11f/0x2e0\n[<0>] copy_process+0x139a/0x1c60\n[<0>] kernel_clone+0x9b/0x3f0\n"
	got := stackFrames(text)
	want := "rwsem_down_read_slowpath < copy_net_ns < create_new_namespaces < copy_process < kernel_clone"
	if got != want {
		t.Fatalf("stackFrames = %q, want %q", got, want)
	}
	if idleStack(got) {
		t.Error("a clone blocked in copy_net_ns counted as idle")
	}
	if !idleStack(stackFrames("[<0>] futex_wait_queue+0x60/0x90\n[<0>] futex_wait+0x185/0x270\n")) {
		t.Error("a futex wait not counted as idle")
	}
}

func TestKernelStacksOfThisProcess(t *testing.T) {
	all := kernelStacks(os.Getpid(), true)
	if len(all) == 0 {
		t.Fatal("no stacks, not even an error")
	}
	if os.Geteuid() != 0 {
		return // /proc/PID/stack is root's
	}
	if _, err := os.ReadFile("/proc/self/stack"); err != nil {
		t.Skipf("this kernel has no /proc/PID/stack: %v", err)
	}
	if !strings.Contains(all[0], "x ") {
		t.Errorf("kernelStacks = %q, want counted stacks", all)
	}
	// Without idle threads' stacks, they are still counted: the list is
	// never empty for a live process.
	if busy := kernelStacks(os.Getpid(), false); len(busy) == 0 {
		t.Errorf("kernelStacks without idle threads is empty; want them counted")
	}
}

func TestStatusField(t *testing.T) {
	st := "Name:\tcellvm-vmm\nState:\tS (sleeping)\nSigPnd:\t0000000000000000\nSigBlk:\t0000000400000000\n"
	if got := statusField(st, "SigBlk"); got != "0000000400000000" {
		t.Errorf("SigBlk = %q", got)
	}
	if got := statusField(st, "State"); got != "S (sleeping)" {
		t.Errorf("State = %q", got)
	}
	if got := statusField(st, "ShdPnd"); got != "" {
		t.Errorf("a missing field = %q", got)
	}
}
