package engine

import (
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"syscall"

	"github.com/cellvm/cellvm/sandbox"
)

var vmEndedRe = regexp.MustCompile(`msg="vm ended" reason=("[^"]*"|\S+)(?: error=("[^"]*"|\S+))?`)

// lostInfo says why a VMM process ended with err, from its exit status and,
// when it exited by itself, the "vm ended" line of its log.
func lostInfo(err error, vmmLog string) sandbox.LostInfo {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			sig := ws.Signal()
			exit := "killed by " + sig.String()
			if sig == syscall.SIGSYS {
				return sandbox.LostInfo{KilledBy: "seccomp", Exit: exit,
					Reason: "the VMM made a system call its seccomp filter forbids and was killed (a VMM bug or an escape attempt)"}
			}
			return sandbox.LostInfo{KilledBy: "signal", Exit: exit,
				Reason: fmt.Sprintf("the VMM was killed by %s (the host's OOM killer, a cgroup limit or an operator)", sig)}
		}
	}
	exit := "unknown (the VMM was adopted from an earlier daemon)"
	if ee != nil {
		exit = fmt.Sprintf("exit status %d", ee.ExitCode())
	} else if err == nil {
		exit = "exit status 0"
	}
	reason := "the VMM exited"
	if m := vmEndedRe.FindAllStringSubmatch(vmmLog, -1); len(m) > 0 {
		last := m[len(m)-1]
		how := strings.Trim(last[1], `"`)
		if e := strings.Trim(last[2], `"`); e != "" && e != "<nil>" {
			how = e
		}
		reason = "the VM ended: " + how
	}
	return sandbox.LostInfo{Exit: exit, Reason: reason}
}
