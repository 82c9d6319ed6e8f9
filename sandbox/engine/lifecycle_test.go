package engine

import (
	"strings"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestLifecycleTable writes out every (phase, event) pair: where it goes,
// or "-" for a refusal. A pair missing here, or one the table answers
// otherwise, fails.
func TestLifecycleTable(t *testing.T) {
	const x = phase(255) // refused
	E := []lifeEvent{evBooted, evCellStart, evCellEnd, evSnapshotStart, evSnapshotEnd, evPauseStart, evPaused,
		evPauseFailed, evResumeStart, evResumed, evResumeFailed, evVMExited, evDelete, evDeleted}
	want := map[phase][]phase{
		//                  booted        cellStart  cellEnd        snapStart          snapEnd        pauseStart    paused       pauseFailed   resumeStart    resumed       resumeFailed vmExited   delete         deleted
		phaseStarting:     {phaseRunning, x, x, x, x, x, x, x, x, x, x, phaseLost, phaseDeleting, x},
		phaseRunning:      {x, phaseCell, x, phaseSnapshotting, x, phasePausing, x, x, x, x, x, phaseLost, phaseDeleting, x},
		phaseCell:         {x, x, phaseRunning, x, x, x, x, x, x, x, x, phaseLost, phaseDeleting, x},
		phaseSnapshotting: {x, x, x, x, phaseRunning, x, x, x, x, x, x, phaseLost, phaseDeleting, x},
		phasePausing:      {x, x, x, x, x, x, phasePaused, phaseRunning, x, x, x, phaseLost, phaseDeleting, x},
		phasePaused:       {x, x, x, x, x, x, x, x, phaseResuming, x, x, phaseLost, phaseDeleting, x},
		phaseResuming:     {x, x, x, x, x, x, x, x, x, phaseRunning, phasePaused, phaseLost, phaseDeleting, x},
		phaseLost:         {x, x, phaseLost, x, phaseLost, x, x, x, x, x, x, x, phaseDeleting, x},
		phaseDeleting:     {x, x, phaseDeleting, x, phaseDeleting, x, x, x, x, x, x, x, x, phaseDeleted},
		phaseDeleted:      {x, x, x, x, x, x, x, x, x, x, x, x, x, x},
	}
	if len(E) != int(numLifeEvents) {
		t.Fatalf("the test lists %d events, the lifecycle has %d", len(E), numLifeEvents)
	}
	for p := phase(0); p < numPhases; p++ {
		row, ok := want[p]
		if !ok {
			t.Errorf("phase %v has no row in the test", p)
			continue
		}
		if len(row) != len(E) {
			t.Errorf("phase %v: the row has %d entries, want %d", p, len(row), len(E))
			continue
		}
		for i, ev := range E {
			got, err := next(p, ev)
			switch {
			case row[i] == x && err == nil:
				t.Errorf("%v in %v: moved to %v, want a refusal", ev, p, got)
			case row[i] == x:
				if got != p {
					t.Errorf("%v in %v: refused but the phase became %v", ev, p, got)
				}
				if !strings.Contains(err.Error(), p.String()) || !strings.Contains(err.Error(), ev.String()) {
					t.Errorf("%v in %v: refusal %q does not name both", ev, p, err)
				}
			case err != nil:
				t.Errorf("%v in %v: refused (%v), want %v", ev, p, err, row[i])
			case got != row[i]:
				t.Errorf("%v in %v: %v, want %v", ev, p, got, row[i])
			}
		}
	}
	if _, err := next(numPhases, evBooted); err == nil {
		t.Error("an unknown phase moved")
	}
	if _, err := next(phaseRunning, numLifeEvents); err == nil {
		t.Error("an unknown event moved")
	}
}

// TestLifecyclePhasesAsCallersSeeThem checks the contract's states the
// phases read as, which must stay what callers saw before the phases.
func TestLifecyclePhasesAsCallersSeeThem(t *testing.T) {
	want := map[phase]sandbox.State{
		phaseStarting: sandbox.StateStarting, phaseRunning: sandbox.StateRunning, phaseCell: sandbox.StateRunning,
		phaseSnapshotting: sandbox.StateRunning, phasePausing: sandbox.StatePaused, phasePaused: sandbox.StatePaused,
		phaseResuming: sandbox.StatePaused, phaseLost: sandbox.StateLost, phaseDeleting: sandbox.StateStopping,
		phaseDeleted: sandbox.StateStopping,
	}
	for p := phase(0); p < numPhases; p++ {
		if got := p.State(); got != want[p] {
			t.Errorf("%v reads as %q, want %q", p, got, want[p])
		}
	}
}

// TestLifecycleOneCellAtATime: of many cells started at once exactly one
// moves the sandbox; the rest are refused, as the busy flag did.
func TestLifecycleOneCellAtATime(t *testing.T) {
	var l lifecycle
	if _, err := l.move(evBooted); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.move(evCellStart); err == nil {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d cells started at once", won)
	}
	if from, err := l.move(evPauseStart); err == nil || from != phaseCell {
		t.Errorf("a pause during a cell: from %v, err %v; want refused in cell", from, err)
	}
	if _, err := l.move(evVMExited); err != nil {
		t.Fatal(err)
	}
	if _, err := l.move(evCellEnd); err != nil || l.phase() != phaseLost {
		t.Errorf("the cell's end after its VM exited: %v, phase %v; want lost kept", err, l.phase())
	}
}

// FuzzLifecycle drives a lifecycle with any sequence of events: it never
// panics, every phase it reaches is known, a refused event leaves the
// phase as it was, and once deleted nothing moves it.
func FuzzLifecycle(f *testing.F) {
	f.Add([]byte{byte(evBooted), byte(evCellStart), byte(evVMExited), byte(evCellEnd), byte(evDelete), byte(evDeleted)})
	f.Add([]byte{byte(evBooted), byte(evPauseStart), byte(evPaused), byte(evResumeStart), byte(evResumeFailed), byte(evResumeStart), byte(evResumed)})
	f.Fuzz(func(t *testing.T, evs []byte) {
		var l lifecycle
		for _, b := range evs {
			ev := lifeEvent(b % (byte(numLifeEvents) + 2)) // a few unknown ones too
			before := l.phase()
			from, err := l.move(ev)
			after := l.phase()
			if from != before {
				t.Fatalf("%v: move says it left %v, the phase was %v", ev, from, before)
			}
			if after >= numPhases {
				t.Fatalf("%v from %v reached an unknown phase %v", ev, before, after)
			}
			if err != nil && after != before {
				t.Fatalf("%v refused in %v, yet the phase became %v", ev, before, after)
			}
			if before == phaseDeleted && after != phaseDeleted {
				t.Fatalf("%v moved a deleted sandbox to %v", ev, after)
			}
		}
	})
}
