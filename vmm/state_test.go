package vmm

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// refused stands for a refusal in the transition table below.
const refused = machineState(255)

// TestMachineTransitionTable checks next for every (state, event) pair
// against the table written out here, and fails when a pair is missing
// from it, so a new state or event cannot land without its row. A refusal
// is an error naming the state the machine is in and the one the event
// leads to, and leaves the state as it was.
func TestMachineTransitionTable(t *testing.T) {
	want := map[machineState]map[machineEvent]machineState{
		stateBuilt: {
			evRun: stateRunning, evPause: refused, evPaused: refused, evPauseFailed: refused, evResume: refused,
			evSave: refused, evRestore: stateBuilt, evEnd: stateEnded, evClose: stateClosed,
		},
		stateRunning: {
			evRun: refused, evPause: statePausing, evPaused: refused, evPauseFailed: refused, evResume: refused,
			evSave: refused, evRestore: refused, evEnd: stateEnded, evClose: refused,
		},
		statePausing: {
			evRun: refused, evPause: refused, evPaused: statePaused, evPauseFailed: stateRunning, evResume: refused,
			evSave: refused, evRestore: refused, evEnd: stateEnded, evClose: refused,
		},
		statePaused: {
			evRun: refused, evPause: refused, evPaused: refused, evPauseFailed: refused, evResume: stateRunning,
			evSave: statePaused, evRestore: refused, evEnd: stateEnded, evClose: refused,
		},
		stateEnded: {
			evRun: refused, evPause: refused, evPaused: refused, evPauseFailed: refused, evResume: refused,
			evSave: refused, evRestore: refused, evEnd: refused, evClose: stateClosed,
		},
		stateClosed: {
			evRun: refused, evPause: refused, evPaused: refused, evPauseFailed: refused, evResume: refused,
			evSave: refused, evRestore: refused, evEnd: refused, evClose: refused,
		},
	}
	if len(want) != int(numStates) {
		t.Errorf("the table has %d states, the machine %d", len(want), numStates)
	}
	for s := machineState(0); s < numStates; s++ {
		row, ok := want[s]
		if !ok {
			t.Errorf("state %s has no row in the table", s)
			continue
		}
		if len(row) != int(numEvents) {
			t.Errorf("state %s: the row has %d events, the machine %d", s, len(row), numEvents)
		}
		for e := machineEvent(0); e < numEvents; e++ {
			w, ok := row[e]
			if !ok {
				t.Errorf("(%s, %s) is missing from the table", s, e)
				continue
			}
			got, err := next(s, e)
			switch {
			case w == refused && err == nil:
				t.Errorf("(%s, %s) moved to %s, want a refusal", s, e, got)
			case w == refused:
				if got != s {
					t.Errorf("(%s, %s) refused but gave state %s, want %s unchanged", s, e, got, s)
				}
				msg := err.Error()
				if !strings.Contains(msg, "machine "+s.String()+":") || !strings.Contains(msg, " to "+moves[e].to.String()+")") ||
					!strings.Contains(msg, e.String()+" refused") {
					t.Errorf("(%s, %s): refusal %q does not name the state, the event and the state it leads to", s, e, msg)
				}
			case err != nil:
				t.Errorf("(%s, %s) refused (%v), want %s", s, e, err, w)
			case got != w:
				t.Errorf("(%s, %s) moved to %s, want %s", s, e, got, w)
			}
		}
	}
}

// TestUnknownStateOrEventIsRefused: a state or event outside the table is
// refused with an error, not a panic or an index out of range.
func TestUnknownStateOrEventIsRefused(t *testing.T) {
	if _, err := next(stateRunning, numEvents); err == nil || !strings.Contains(err.Error(), "event(") {
		t.Errorf("an unknown event: %v, want a refusal naming it", err)
	}
	if _, err := next(numStates, evEnd); err == nil || !strings.Contains(err.Error(), "state(") {
		t.Errorf("an unknown state: %v, want a refusal naming it", err)
	}
}

// testMachine is a machine with no VM, in state s: enough for the moves
// that touch no vCPU and no device.
func testMachine(s machineState) *Machine {
	m := &Machine{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	m.life.ended = make(chan struct{})
	m.life.state = s
	return m
}

// TestEndFirstWins: the first end moves the machine to ended, closes
// ended and sets why; a later end, and an end after Close, change nothing.
// Run of a machine stopped before its vCPUs started returns that end.
func TestEndFirstWins(t *testing.T) {
	m := testMachine(stateBuilt)
	m.end(ErrTripleFault, "KVM_EXIT_SHUTDOWN")
	m.Stop()
	if m.life.state != stateEnded {
		t.Fatalf("state %s after end, want ended", m.life.state)
	}
	select {
	case <-m.life.ended:
	default:
		t.Fatal("ended is open after end")
	}
	if m.life.endErr != ErrTripleFault || m.life.endReason != "KVM_EXIT_SHUTDOWN" {
		t.Errorf("end (%v, %q), want the first's", m.life.endErr, m.life.endReason)
	}
	if err := m.Run(); !errors.Is(err, ErrTripleFault) {
		t.Errorf("Run of an ended machine = %v, want its end", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	m.Stop()
	if m.life.state != stateClosed {
		t.Errorf("Stop after Close moved the machine to %s", m.life.state)
	}
}

// TestPauseAndResumeMoves: Pause moves a running machine (here one with no
// vCPUs and no devices) through pausing to paused, a second Pause does
// nothing, Save is refused until paused, and Resume moves it back to
// running and drops the pause's request. Pause of a machine that does not
// run returns ErrNotRunning and moves nothing.
func TestPauseAndResumeMoves(t *testing.T) {
	for _, s := range []machineState{stateBuilt, stateEnded, stateClosed} {
		m := testMachine(s)
		if err := m.Pause(); !errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), s.String()) {
			t.Errorf("Pause of a %s machine: %v, want ErrNotRunning naming %s", s, err, s)
		}
		if m.life.state != s {
			t.Errorf("Pause of a %s machine moved it to %s", s, m.life.state)
		}
	}
	m := testMachine(stateRunning)
	if err := m.Save(nil, nil); !errors.Is(err, ErrNotPaused) {
		t.Errorf("Save of a running machine: %v, want ErrNotPaused", err)
	}
	if err := m.Resume(); err != nil || m.life.state != stateRunning {
		t.Errorf("Resume of a running machine: %v, state %s; want nil, running", err, m.life.state)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	if m.life.state != statePaused || m.life.req == nil {
		t.Fatalf("after Pause: state %s, request %v; want paused with a request", m.life.state, m.life.req)
	}
	if err := m.Pause(); err != nil || m.life.state != statePaused {
		t.Errorf("a second Pause: %v, state %s; want nil, paused", err, m.life.state)
	}
	if err := m.Close(); err == nil || m.life.state != statePaused {
		t.Errorf("Close of a paused machine: %v, state %s; want a refusal, paused", err, m.life.state)
	}
	req := m.life.req
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if m.life.state != stateRunning || m.life.req != nil {
		t.Errorf("after Resume: state %s, request %v; want running, none", m.life.state, m.life.req)
	}
	select {
	case <-req.resume:
	default:
		t.Error("Resume did not release the parked threads")
	}
}

// TestCloseIsRefusedWhileVCPUsRun: Close of a running machine is refused
// with an error naming both states and releases nothing; after the end,
// Close closes, and a second Close returns nil.
func TestCloseIsRefusedWhileVCPUsRun(t *testing.T) {
	m := testMachine(stateRunning)
	err := m.Close()
	if err == nil || !strings.Contains(err.Error(), "running") || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Close of a running machine: %v, want a refusal naming running and closed", err)
	}
	m.Stop()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if m.life.state != stateClosed {
		t.Errorf("state %s after Close, want closed", m.life.state)
	}
}
