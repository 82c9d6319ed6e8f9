package process

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// TestEndReportReasons: the report's reason comes from how Run ended: the
// machine's typed errors, the host's stop (a signal, a snapshot), or a
// start that never reached the guest.
func TestEndReportReasons(t *testing.T) {
	for _, c := range []struct {
		name    string
		started bool
		signal  string
		snap    bool
		err     error
		want    control.End
	}{
		{"guest reset", true, "", false, nil, control.End{Reason: control.ReasonGuestReset}},
		{"triple fault", true, "", false, vmm.ErrTripleFault,
			control.End{Reason: control.ReasonTripleFault, Error: vmm.ErrTripleFault.Error()}},
		{"kernel panic", true, "", false, vmm.ErrKernelPanic,
			control.End{Reason: control.ReasonKernelPanic, Error: vmm.ErrKernelPanic.Error()}},
		{"crash event", true, "", false, fmt.Errorf("%w (system event 5)", vmm.ErrGuestCrashed),
			control.End{Reason: control.ReasonGuestCrashed, Error: "guest crashed (system event 5)"}},
		{"halt", true, "", false, vmm.ErrGuestHalted,
			control.End{Reason: control.ReasonGuestCrashed, Error: vmm.ErrGuestHalted.Error()}},
		{"KVM failed", true, "", false, errors.New("vcpu 0: KVM_EXIT_INTERNAL_ERROR, suberror 1"),
			control.End{Reason: control.ReasonInternalError, Error: "vcpu 0: KVM_EXIT_INTERNAL_ERROR, suberror 1"}},
		{"SIGTERM", true, "terminated", false, nil, control.End{Reason: control.ReasonStopped, Signal: "terminated"}},
		{"paused to disk", true, "", true, nil, control.End{Reason: control.ReasonSnapshotStop}},
		{"a guest error beats a stop", true, "terminated", false, vmm.ErrTripleFault,
			control.End{Reason: control.ReasonTripleFault, Error: vmm.ErrTripleFault.Error()}},
		{"jail failed", false, "", false, errors.New("jail: pivot_root: EPERM"),
			control.End{Reason: control.ReasonStartFailed, Error: "jail: pivot_root: EPERM"}},
	} {
		var e ending
		if c.started {
			e.guestRuns()
		}
		if c.signal != "" {
			e.stopped(c.signal)
		}
		if c.snap {
			e.snapshotStop()
		}
		if got := e.report(c.err); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
