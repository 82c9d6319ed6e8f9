package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Reason is why a VM ended, as its VMM saw it.
type Reason string

const (
	// ReasonGuestReset: the guest rebooted or reset itself (reboot=k
	// through the i8042, or a KVM system event), the clean end of a guest
	// without ACPI.
	ReasonGuestReset Reason = "guest_reset"
	// ReasonKernelPanic: the guest's kernel panicked (a reset with the
	// BIOS warm-boot flag set; vmm.ErrKernelPanic).
	ReasonKernelPanic Reason = "kernel_panic"
	// ReasonTripleFault: the guest triple-faulted (KVM_EXIT_SHUTDOWN).
	ReasonTripleFault Reason = "triple_fault"
	// ReasonGuestCrashed: the guest reported a crash (a KVM crash event)
	// or halted with interrupts off.
	ReasonGuestCrashed Reason = "guest_crashed"
	// ReasonInternalError: KVM or the VMM failed while the guest ran (a
	// failed entry, a KVM internal error, an exit it could not serve).
	ReasonInternalError Reason = "internal_error"
	// ReasonStopped: the VMM was stopped on a signal (SIGTERM, SIGINT);
	// End.Signal names it.
	ReasonStopped Reason = "stopped"
	// ReasonSnapshotStop: a snapshot asked it to end once written
	// (ThenStop: a pause to disk).
	ReasonSnapshotStop Reason = "snapshot_stop"
	// ReasonStartFailed: the machine never ran: its spec, jail, files,
	// KVM or the restore failed before the guest's first instruction.
	ReasonStartFailed Reason = "start_failed"
)

// End is a VMM process's last word: why its VM ended. The VMM writes it
// as it exits into the file in SlotEnd (a jailed VMM cannot open one);
// the daemon reads it with the process's wait status. A process killed by
// a signal (SIGKILL, or SIGSYS from its seccomp filter) writes none: the
// wait status is then the whole account.
type End struct {
	Reason Reason `json:"reason"`
	// Error is the error the VM ended with ("" for a clean end).
	Error string `json:"error,omitempty"`
	// Signal is the signal that stopped it (ReasonStopped).
	Signal string `json:"signal,omitempty"`
}

// Describe says in words how the VM ended: its error, or its reason.
func (e End) Describe() string {
	if e.Error != "" {
		return e.Error
	}
	switch e.Reason {
	case ReasonGuestReset:
		return "the guest reset"
	case ReasonStopped:
		if e.Signal != "" {
			return "stopped on signal " + e.Signal
		}
		return "stopped by the host"
	case ReasonSnapshotStop:
		return "stopped after its snapshot"
	}
	return string(e.Reason)
}

// maxEndError bounds an End report's error, and maxEndBytes the report:
// it is read from a file a jailed process could write anything to.
const (
	maxEndError = 4096
	maxEndBytes = 16 << 10
)

// WriteEnd writes e into f, the file of SlotEnd, and closes f.
func WriteEnd(f *os.File, e End) error {
	if len(e.Error) > maxEndError {
		e.Error = e.Error[:maxEndError] + "..."
	}
	b, err := json.Marshal(e)
	if err == nil {
		_, err = f.Write(append(b, '\n'))
	}
	return errors.Join(err, f.Close())
}

// ReadEnd reads the End report at path; nil (with no error) when the
// VMM wrote none.
func ReadEnd(path string) (*End, error) {
	b, err := readBounded(path, maxEndBytes)
	if errors.Is(err, fs.ErrNotExist) || err == nil && len(b) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("VMM end report: %w", err)
	}
	var e End
	if err := json.Unmarshal(b, &e); err != nil || e.Reason == "" {
		return nil, fmt.Errorf("VMM end report %s: not one (%v)", path, err)
	}
	return &e, nil
}
