package process

import (
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/jail"
)

// seccompFilter is PR_GET_SECCOMP's answer for a process under a seccomp
// filter (SECCOMP_MODE_FILTER).
const seccompFilter = 2

// selfProbe says who this process is where it matters to the jail: its
// uid (getuid) and its seccomp mode (prctl PR_GET_SECCOMP). The jail's
// filter allows both for this check.
func selfProbe() (uid, seccomp int, err error) {
	uid = unix.Getuid()
	mode, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0)
	if err != nil {
		return uid, -1, fmt.Errorf("prctl PR_GET_SECCOMP: %w", err)
	}
	return uid, mode, nil
}

// jailCheck is the VMM's queue gate (vmm.Config.QueueGate): the machine
// runs it once, as the first virtio device is about to be handed its
// queues, the moment the VMM first parses a ring the guest controls, on
// every path (a boot's first DRIVER_OK, a restore's start after the jail).
// It logs "first queue pop" with the process's uid and seccomp mode, which
// the rig reads as the proof that a fork, a template start and a resume
// are jailed by then. With a jail in the spec it is also defence in depth:
// a VMM that finds itself still root, not the jail's uid, or without its
// seccomp filter refuses to go on, and the VM stops with that error,
// whatever ordering bug brought it there.
func jailCheck(j *jail.Spec, log *slog.Logger, probe func() (uid, seccomp int, err error)) func() error {
	return func() error {
		uid, mode, err := probe()
		log.Info("first queue pop", "uid", uid, "seccomp", mode, "jailed", j != nil)
		if j == nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("jail self-check: %w", err)
		}
		if uid == 0 || uid != j.UID || mode != seccompFilter {
			return fmt.Errorf("jail self-check: about to parse the guest's queues with uid %d and seccomp mode %d, where the jail runs uid %d with seccomp mode %d (filter): stopping the VM",
				uid, mode, j.UID, seccompFilter)
		}
		return nil
	}
}
