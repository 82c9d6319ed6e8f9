package engine

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// errAdoptedExited is the exit of a VMM process taken back from an earlier
// daemon: not our child, so its wait status is not known.
var errAdoptedExited = errors.New("vmm process exited")

// lostInfo says why p's VM went: from its wait status and its End report
// (control.End), which it wrote as it exited. Call it once p has exited.
func (p *vmProc) lostInfo() sandbox.LostInfo {
	end, err := control.ReadEnd(filepath.Join(p.dir, endFile))
	if err != nil {
		end = nil // a report that is not one says nothing
	}
	return lostInfo(p.err, end)
}

// lostInfo combines a VMM process's wait error (err, from exec.Cmd.Wait)
// with its End report (nil when it wrote none). A signal that killed it
// is the cause, report or not: SIGSYS is its seccomp filter's, any other
// (SIGKILL) the host's; neither leaves the VMM time to write a report. A
// process that exited says in its report how its VM ended.
func lostInfo(err error, end *control.End) sandbox.LostInfo {
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
	if end == nil {
		return sandbox.LostInfo{Exit: exit, Reason: "the VMM exited without an end report (it failed before it could write one; its log says more)"}
	}
	return sandbox.LostInfo{Exit: exit, Reason: "the VM ended: " + end.Describe()}
}
