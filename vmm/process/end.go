package process

import (
	"errors"
	"sync"

	"github.com/cellvm/cellvm/vmm"
	"github.com/cellvm/cellvm/vmm/control"
)

// ending gathers what the End report needs beyond Run's error: whether
// the guest ever ran, and whether the host stopped it and how. Signal
// and control goroutines write it while Run waits.
type ending struct {
	mu       sync.Mutex
	started  bool   // the guest reached its first instruction
	signal   string // the signal that stopped it ("" if none)
	snapshot bool   // a snapshot asked it to end (control.ThenStop)
}

func (e *ending) guestRuns() {
	e.mu.Lock()
	e.started = true
	e.mu.Unlock()
}

func (e *ending) stopped(signal string) {
	e.mu.Lock()
	e.signal = signal
	e.mu.Unlock()
}

func (e *ending) snapshotStop() {
	e.mu.Lock()
	e.snapshot = true
	e.mu.Unlock()
}

// report is the End report of a VMM whose Run returned err.
func (e *ending) report(err error) control.End {
	e.mu.Lock()
	defer e.mu.Unlock()
	end := control.End{}
	if err != nil {
		end.Error = err.Error()
	}
	switch {
	case !e.started:
		end.Reason = control.ReasonStartFailed
	case errors.Is(err, vmm.ErrKernelPanic):
		end.Reason = control.ReasonKernelPanic
	case errors.Is(err, vmm.ErrTripleFault):
		end.Reason = control.ReasonTripleFault
	case errors.Is(err, vmm.ErrGuestCrashed), errors.Is(err, vmm.ErrGuestHalted):
		end.Reason = control.ReasonGuestCrashed
	case err != nil:
		end.Reason = control.ReasonInternalError
	case e.signal != "":
		end.Reason, end.Signal = control.ReasonStopped, e.signal
	case e.snapshot:
		end.Reason = control.ReasonSnapshotStop
	default:
		end.Reason = control.ReasonGuestReset
	}
	return end
}
