package engine

import (
	"os/exec"
	"strings"
	"testing"
)

func TestLostInfo(t *testing.T) {
	run := func(script string) error { return exec.Command("sh", "-c", script).Run() }
	if got := lostInfo(run("kill -SYS $$"), ""); got.KilledBy != "seccomp" || !strings.Contains(got.Exit, "bad system call") {
		t.Errorf("SIGSYS: %+v", got)
	}
	if got := lostInfo(run("kill -KILL $$"), ""); got.KilledBy != "signal" || !strings.Contains(got.Reason, "OOM") {
		t.Errorf("SIGKILL: %+v", got)
	}
	log := `time=x level=INFO msg="vm starting" vcpus=1
time=y level=INFO msg="vm ended" reason=KVM_EXIT_SHUTDOWN error="guest triple-faulted (KVM_EXIT_SHUTDOWN)" uptime_ms=20195`
	if got := lostInfo(run("exit 1"), log); got.KilledBy != "" || got.Exit != "exit status 1" || got.Reason != "the VM ended: guest triple-faulted (KVM_EXIT_SHUTDOWN)" {
		t.Errorf("exit 1 after a triple fault: %+v", got)
	}
	if got := lostInfo(run("exit 0"), `msg="vm ended" reason="i8042 reset" error=<nil>`); got.Reason != "the VM ended: i8042 reset" {
		t.Errorf("clean end: %+v", got)
	}
}
