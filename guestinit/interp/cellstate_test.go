package interp

import (
	"testing"

	"github.com/cellvm/cellvm/cell"
)

// refused marks a pair that cellState.next refuses.
const refused = "refused"

// terminal is the row of a final state: it refuses every event.
var terminal = func() (row [numCellEvents]string) {
	for i := range row {
		row[i] = refused
	}
	return row
}()

// cellTable is every state a cell run can reach and, for each event, the
// state it moves to or "refused". An event missing from a row reads as ""
// and fails the test.
var cellTable = map[string][numCellEvents]string{
	"sent": {
		evStarted:   "running",
		evDoneOK:    "done(ok, kept, -)",
		evDoneError: "done(error, kept, -)",
		evInterrupt: "interrupting(interrupt, before start)",
		evTimeout:   "interrupting(timeout, before start)",
		evGraceOver: refused,
		evRestart:   "killing(restart)",
		evProtocol:  "killing(protocol)",
		evFailure:   "killing(failure)",
		evExited:    "done(lost, lost, -)",
		evOOMKilled: "done(error, lost, oom)",
	},
	"running": {
		evStarted:   refused,
		evDoneOK:    "done(ok, kept, -)",
		evDoneError: "done(error, kept, -)",
		evInterrupt: "interrupting(interrupt)",
		evTimeout:   "interrupting(timeout)",
		evGraceOver: refused,
		evRestart:   "killing(restart)",
		evProtocol:  "killing(protocol)",
		evFailure:   "killing(failure)",
		evExited:    "done(lost, lost, -)",
		evOOMKilled: "done(error, lost, oom)",
	},
	"interrupting(interrupt, before start)": {
		evStarted:   "interrupting(interrupt)",
		evDoneOK:    "done(ok, kept, interrupt)",
		evDoneError: "done(error, kept, interrupt)",
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: "killing(interrupt)",
		evRestart:   "killing(restart)",
		evProtocol:  "killing(interrupt)",
		evFailure:   "killing(interrupt)",
		evExited:    "done(lost, lost, -)",
		evOOMKilled: "done(error, lost, oom)",
	},
	"interrupting(interrupt)": {
		evStarted:   refused,
		evDoneOK:    "done(ok, kept, interrupt)",
		evDoneError: "done(error, kept, interrupt)",
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: "killing(interrupt)",
		evRestart:   "killing(restart)",
		evProtocol:  "killing(interrupt)",
		evFailure:   "killing(interrupt)",
		evExited:    "done(lost, lost, -)",
		evOOMKilled: "done(error, lost, oom)",
	},
	"interrupting(timeout, before start)": {
		evStarted:   "interrupting(timeout)",
		evDoneOK:    "done(timeout, kept, timeout)",
		evDoneError: "done(timeout, kept, timeout)",
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: "killing(timeout)",
		evRestart:   "killing(timeout)",
		evProtocol:  "killing(timeout)",
		evFailure:   "killing(timeout)",
		evExited:    "done(lost, lost, -)",
		evOOMKilled: "done(error, lost, oom)",
	},
	"interrupting(timeout)": {
		evStarted:   refused,
		evDoneOK:    "done(timeout, kept, timeout)",
		evDoneError: "done(timeout, kept, timeout)",
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: "killing(timeout)",
		evRestart:   "killing(timeout)",
		evProtocol:  "killing(timeout)",
		evFailure:   "killing(timeout)",
		evExited:    "done(lost, lost, -)",
		evOOMKilled: "done(error, lost, oom)",
	},
	"killing(failure)": {
		evStarted:   refused,
		evDoneOK:    refused,
		evDoneError: refused,
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: refused,
		evRestart:   "killing(restart)",
		evProtocol:  "killing(protocol)",
		evFailure:   "killing(failure)",
		evExited:    "done(lost, lost, failure)",
		evOOMKilled: "done(lost, lost, failure)",
	},
	"killing(protocol)": {
		evStarted:   refused,
		evDoneOK:    refused,
		evDoneError: refused,
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: refused,
		evRestart:   "killing(restart)",
		evProtocol:  "killing(protocol)",
		evFailure:   "killing(protocol)",
		evExited:    "done(lost, lost, protocol)",
		evOOMKilled: "done(lost, lost, protocol)",
	},
	"killing(interrupt)": {
		evStarted:   refused,
		evDoneOK:    refused,
		evDoneError: refused,
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: refused,
		evRestart:   "killing(restart)",
		evProtocol:  "killing(interrupt)",
		evFailure:   "killing(interrupt)",
		evExited:    "done(lost, lost, interrupt)",
		evOOMKilled: "done(lost, lost, interrupt)",
	},
	"killing(restart)": {
		evStarted:   refused,
		evDoneOK:    refused,
		evDoneError: refused,
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: refused,
		evRestart:   "killing(restart)",
		evProtocol:  "killing(restart)",
		evFailure:   "killing(restart)",
		evExited:    "done(lost, lost, restart)",
		evOOMKilled: "done(lost, lost, restart)",
	},
	"killing(timeout)": {
		evStarted:   refused,
		evDoneOK:    refused,
		evDoneError: refused,
		evInterrupt: refused,
		evTimeout:   refused,
		evGraceOver: refused,
		evRestart:   "killing(timeout)",
		evProtocol:  "killing(timeout)",
		evFailure:   "killing(timeout)",
		evExited:    "done(timeout, lost, timeout)",
		evOOMKilled: "done(timeout, lost, timeout)",
	},
	"done(ok, kept, -)":            terminal,
	"done(error, kept, -)":         terminal,
	"done(ok, kept, interrupt)":    terminal,
	"done(error, kept, interrupt)": terminal,
	"done(timeout, kept, timeout)": terminal,
	"done(lost, lost, -)":          terminal,
	"done(error, lost, oom)":       terminal,
	"done(lost, lost, failure)":    terminal,
	"done(lost, lost, protocol)":   terminal,
	"done(lost, lost, interrupt)":  terminal,
	"done(lost, lost, restart)":    terminal,
	"done(timeout, lost, timeout)": terminal,
}

// TestCellTransitions walks every state reachable from sent and checks
// each (state, event) pair against cellTable: a pair the table lacks, a
// row for a state that cannot be reached, a phase never reached, or a
// different answer fails.
func TestCellTransitions(t *testing.T) {
	seen := map[string]bool{}
	phases := map[cellPhase]bool{}
	queue := []cellState{{phase: phaseSent}}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		name := s.String()
		if seen[name] {
			continue
		}
		seen[name] = true
		phases[s.phase] = true
		row, ok := cellTable[name]
		if !ok {
			t.Errorf("state %s is reachable but has no row", name)
		}
		for e := range numCellEvents {
			got, err := s.next(e)
			gotName := got.String()
			if err != nil {
				gotName = refused
				if got != s {
					t.Errorf("%s + %v: refused but changed the state to %s", name, e, got)
				}
			} else {
				queue = append(queue, got)
			}
			if !ok {
				continue
			}
			switch want := row[e]; want {
			case "":
				t.Errorf("%s + %v: missing from the table (next gives %s)", name, e, gotName)
			case gotName:
			default:
				t.Errorf("%s + %v = %s, want %s", name, e, gotName, want)
			}
		}
	}
	for name := range cellTable {
		if !seen[name] {
			t.Errorf("row %s: state not reachable from sent", name)
		}
	}
	for p := range numCellPhases {
		if !phases[p] {
			t.Errorf("phase %v never reached", p)
		}
	}
}

// TestCellDoneStates checks what each kind of end decides: the driver's
// "done" keeps the state, and a kill's cause or the interpreter's own end
// decides the result's status when it does not.
func TestCellDoneStates(t *testing.T) {
	for _, tc := range []struct {
		events []cellEvent
		status cell.Status
		kept   bool
		cause  stopCause
	}{
		{[]cellEvent{evStarted, evDoneOK}, cell.StatusOK, true, causeNone},
		{[]cellEvent{evStarted, evDoneError}, cell.StatusError, true, causeNone},
		{[]cellEvent{evStarted, evInterrupt, evDoneError}, cell.StatusError, true, causeInterrupt},
		{[]cellEvent{evTimeout, evStarted, evDoneOK}, cell.StatusTimeout, true, causeTimeout},
		{[]cellEvent{evStarted, evTimeout, evGraceOver, evDoneOK, evExited}, cell.StatusTimeout, false, causeTimeout},
		{[]cellEvent{evStarted, evInterrupt, evGraceOver, evOOMKilled}, cell.StatusLost, false, causeInterrupt},
		{[]cellEvent{evStarted, evInterrupt, evRestart, evExited}, cell.StatusLost, false, causeRestart},
		{[]cellEvent{evStarted, evTimeout, evRestart, evExited}, cell.StatusTimeout, false, causeTimeout},
		{[]cellEvent{evStarted, evFailure, evProtocol, evExited}, cell.StatusLost, false, causeProtocol},
		{[]cellEvent{evStarted, evOOMKilled}, cell.StatusError, false, causeOOM},
		{[]cellEvent{evStarted, evTimeout, evExited}, cell.StatusLost, false, causeNone},
	} {
		s := cellState{phase: phaseSent}
		for _, e := range tc.events {
			if next, err := s.next(e); err == nil {
				s = next
			}
		}
		if s.phase != phaseDone || s.status != tc.status || s.kept != tc.kept || s.cause != tc.cause {
			t.Errorf("%v: ended %s, want done(%s, kept %v, %v)", tc.events, s, tc.status, tc.kept, tc.cause)
		}
	}
}

// TestCellTransitionsNeverPanic feeds next states that cannot be reached
// and events out of range: it must answer, and done must stay final.
func TestCellTransitionsNeverPanic(t *testing.T) {
	for p := range numCellPhases + 2 {
		for c := range numStopCauses + 2 {
			for _, sig := range []bool{false, true} {
				for e := range numCellEvents + 2 {
					s := cellState{phase: p, cause: c, signalled: sig, status: cell.StatusOK}
					next, err := s.next(e)
					_ = next.String()
					if p == phaseDone && err == nil {
						t.Errorf("%s + %v: done moved to %s", s, e, next)
					}
					if e >= numCellEvents && err == nil {
						t.Errorf("%s + unknown event %v accepted", s, e)
					}
				}
			}
		}
	}
}
