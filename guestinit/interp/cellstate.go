package interp

import (
	"fmt"

	"github.com/cellvm/cellvm/cell"
)

// cellPhase is where a cell run is in its life. The moves (cellState.next
// has them all, and the table test lists every pair):
//
//   - sent becomes running on the driver's "started";
//   - sent and running become interrupting on an interrupt or the timeout;
//   - sent, running and interrupting become killing on a restart, a broken
//     protocol or a failed poll, and interrupting also when its grace
//     period ends;
//   - sent, running and interrupting become done on the driver's "done"
//     (state kept) or when the interpreter is gone (state lost);
//   - killing becomes done once the interpreter is gone;
//   - done is final.
type cellPhase uint8

const (
	phaseSent cellPhase = iota
	phaseRunning
	phaseInterrupting
	phaseKilling
	phaseDone
	numCellPhases
)

// stopCause is why the supervisor stopped a cell. The causes of a kill are
// ordered by rank: when several arrive, the cell's result names the
// highest (a timed-out cell reports its timeout however it was then
// killed; a restart outranks the interrupt it overtook).
type stopCause uint8

const (
	causeNone      stopCause = iota
	causeFailure             // the supervisor could not poll the interpreter
	causeProtocol            // the driver broke the protocol (PROTOCOL.md)
	causeInterrupt           // Interrupt() or a cancelled context
	causeRestart             // Restart or Close
	causeTimeout             // the cell's time limit
	causeOOM                 // done only: the OOM killer ended the interpreter
	numStopCauses
)

// cellState is a cell run's lifecycle. Which fields mean what depends on
// the phase:
//
//   - sent: the exec command went to the driver, which has not said
//     "started". SIGINT must not be sent yet: it would hit the driver's own
//     loop or the previous cell. Other fields are zero.
//   - running: the driver said "started"; the cell runs user code and may
//     be sent SIGINT. Other fields are zero.
//   - interrupting: the supervisor asked the cell to stop. cause is why
//     (causeTimeout or causeInterrupt). signalled says SIGINT has been
//     sent; it is false when the interrupt came before "started", and the
//     signal goes out on "started". The grace period (cellRun.grace, grace.go)
//     runs from the interrupt and again from the signal; when it ends the
//     interpreter is killed.
//   - killing: the supervisor killed the interpreter and everything it
//     started, and waits for it to exit. cause is why, the highest-ranked
//     of the reasons so far. The driver's frames no longer decide the
//     result.
//   - done: the cell's result is decided. status is the result's status;
//     kept says the interpreter and its state survived (the driver said
//     "done" before any kill). cause: with kept, the interrupt the cell
//     answered (causeNone if none); without, why the interpreter was lost
//     (the kill's cause, causeOOM, or causeNone when it died by itself,
//     interrupted or not).
type cellState struct {
	phase     cellPhase
	cause     stopCause
	signalled bool
	status    cell.Status
	kept      bool
}

// cellEvent is something that happens to a running cell: a frame from the
// driver, a request, a timer, or the interpreter's end.
type cellEvent uint8

const (
	evStarted   cellEvent = iota // the driver's "started" frame
	evDoneOK                     // the driver's "done" frame, status ok
	evDoneError                  // the driver's "done" frame, status error
	evInterrupt                  // Interrupt() or the context ended
	evTimeout                    // the cell's time limit passed
	evGraceOver                  // the grace period after an interrupt ran out
	evRestart                    // Restart or Close killed the interpreter
	evProtocol                   // the driver broke the protocol
	evFailure                    // the supervisor could not poll the interpreter
	evExited                     // the interpreter is gone, no OOM kill counted
	evOOMKilled                  // the interpreter is gone, and its cgroup counted an OOM kill
	numCellEvents
)

// next returns the state after e, or an error when e has no place in s (a
// frame out of order, a second interrupt, anything after done): the
// caller then keeps s and ignores e. It never panics, whatever s and e are.
func (s cellState) next(e cellEvent) (cellState, error) {
	refuse := func() (cellState, error) {
		return s, fmt.Errorf("cell event %v refused in state %v", e, s)
	}
	switch s.phase {
	case phaseSent, phaseRunning, phaseInterrupting:
		if s.phase == phaseInterrupting && !s.cause.interrupts() || s.phase != phaseInterrupting && s.cause != causeNone {
			return refuse()
		}
		switch e {
		case evStarted:
			switch {
			case s.phase == phaseSent:
				return cellState{phase: phaseRunning}, nil
			case s.phase == phaseInterrupting && !s.signalled:
				return cellState{phase: phaseInterrupting, cause: s.cause, signalled: true}, nil
			}
		case evDoneOK, evDoneError:
			d := cellState{phase: phaseDone, status: cell.StatusOK, kept: true, cause: s.cause}
			if e == evDoneError {
				d.status = cell.StatusError
			}
			if s.cause == causeTimeout {
				d.status = cell.StatusTimeout
			}
			return d, nil
		case evInterrupt, evTimeout:
			if s.phase != phaseInterrupting {
				c := causeInterrupt
				if e == evTimeout {
					c = causeTimeout
				}
				return cellState{phase: phaseInterrupting, cause: c, signalled: s.phase == phaseRunning}, nil
			}
		case evGraceOver:
			if s.phase == phaseInterrupting {
				return cellState{phase: phaseKilling, cause: s.cause}, nil
			}
		case evRestart, evProtocol, evFailure:
			return cellState{phase: phaseKilling, cause: max(s.cause, e.killCause())}, nil
		case evExited:
			return cellState{phase: phaseDone, status: cell.StatusLost}, nil
		case evOOMKilled:
			return cellState{phase: phaseDone, status: cell.StatusError, cause: causeOOM}, nil
		}
	case phaseKilling:
		if s.cause == causeNone || s.cause > causeTimeout {
			return refuse()
		}
		switch e {
		case evRestart, evProtocol, evFailure:
			return cellState{phase: phaseKilling, cause: max(s.cause, e.killCause())}, nil
		case evExited, evOOMKilled:
			// The kill, not the OOM killer, ended it.
			d := cellState{phase: phaseDone, status: cell.StatusLost, cause: s.cause}
			if s.cause == causeTimeout {
				d.status = cell.StatusTimeout
			}
			return d, nil
		}
	}
	return refuse()
}

// interrupts says whether c is a cause that interrupts (rather than kills).
func (c stopCause) interrupts() bool {
	return c == causeInterrupt || c == causeTimeout
}

// killCause is the cause of a kill event.
func (e cellEvent) killCause() stopCause {
	switch e {
	case evRestart:
		return causeRestart
	case evProtocol:
		return causeProtocol
	}
	return causeFailure
}

func (p cellPhase) String() string {
	if p < numCellPhases {
		return [...]string{"sent", "running", "interrupting", "killing", "done"}[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

func (c stopCause) String() string {
	if c < numStopCauses {
		return [...]string{"-", "failure", "protocol", "interrupt", "restart", "timeout", "oom"}[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

func (e cellEvent) String() string {
	if e < numCellEvents {
		return [...]string{"started", "done ok", "done error", "interrupt", "timeout", "grace over",
			"restart", "protocol", "failure", "exited", "oom killed"}[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// String names the state as the transition table does: "running",
// "interrupting(timeout)", "interrupting(timeout, before start)",
// "killing(restart)", "done(ok, kept, -)", "done(lost, lost, restart)".
func (s cellState) String() string {
	switch s.phase {
	case phaseSent, phaseRunning:
		return s.phase.String()
	case phaseInterrupting:
		if !s.signalled {
			return fmt.Sprintf("interrupting(%v, before start)", s.cause)
		}
		return fmt.Sprintf("interrupting(%v)", s.cause)
	case phaseKilling:
		return fmt.Sprintf("killing(%v)", s.cause)
	case phaseDone:
		kept := "lost"
		if s.kept {
			kept = "kept"
		}
		return fmt.Sprintf("done(%s, %s, %v)", s.status, kept, s.cause)
	}
	return s.phase.String()
}
