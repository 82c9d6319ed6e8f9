package engine

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cellvm/cellvm/sandbox"
)

// phase is where a sandbox is in its life, as the engine tracks it: finer
// than the contract's sandbox.State, which is what callers see (phase.State).
// One table (moves) says which event takes which phase where; every change
// goes through lifecycle.move, which refuses any other.
//
// What the sandbox's fields mean in each phase:
//
//   - starting: reserved and booting (launch, or a template build's VM).
//     proc, agent and net are being set up; callers see "starting".
//   - running: the VM runs and nothing excludes a request. proc is the live
//     VMM, agent its guest's agent.
//   - cell: a cell runs; cellDeadline is its host deadline. A second cell,
//     a pause or a snapshot is ErrBusy (the old busy flag). Exec and file
//     calls go on beside it.
//   - snapshotting: a snapshot is being written while the VM runs on;
//     cellDeadline bounds it. Cells, pauses and snapshots are ErrBusy.
//   - pausing: the VMM is writing the machine to disk and will end; proc
//     is still that VMM (its exit is the pause's: proc.ended), s.life is
//     held, and calls that need the guest wait for the pause and then
//     resume. Callers see "paused".
//   - paused: the machine is on disk under paused/, proc is nil or the
//     ended VMM, cgroup nil; no memory is held. Callers see "paused".
//   - resuming: a VMM is restoring paused/; s.life is held. Callers see
//     "paused" until it is back. A resume that fails before its VMM
//     starts goes back to paused; one that fails after (the guest may
//     have run on from the image, which is used now) is lost.
//   - lost: the VM ended without being asked; lost says why. Only delete.
//   - deleting: destroy is stopping the VM and removing its files; the
//     sandbox is not found any more. Callers see "stopping".
//   - deleted: gone from the manager; nothing of it is left.
type phase uint8

const (
	phaseStarting phase = iota
	phaseRunning
	phaseCell
	phaseSnapshotting
	phasePausing
	phasePaused
	phaseResuming
	phaseLost
	phaseDeleting
	phaseDeleted
	numPhases
)

var phaseNames = [numPhases]string{"starting", "running", "cell", "snapshotting", "pausing", "paused", "resuming", "lost", "deleting", "deleted"}

func (p phase) String() string {
	if p < numPhases {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", p)
}

// State is the phase as the contract names it.
func (p phase) State() sandbox.State {
	switch p {
	case phaseStarting:
		return sandbox.StateStarting
	case phaseRunning, phaseCell, phaseSnapshotting:
		return sandbox.StateRunning
	case phasePausing, phasePaused, phaseResuming:
		return sandbox.StatePaused
	case phaseLost:
		return sandbox.StateLost
	default:
		return sandbox.StateStopping
	}
}

// busy reports whether the phase holds the sandbox as a cell does: not
// idle while its host deadline (cellDeadline) lasts (the reaper).
func (p phase) busy() bool {
	return p == phaseCell || p == phaseSnapshotting || p == phasePausing
}

// lifeEvent is what moves a sandbox from one phase to another.
type lifeEvent uint8

const (
	evBooted        lifeEvent = iota // its VM's agent answered
	evCellStart                      // a cell begins
	evCellEnd                        // the cell ended (however)
	evSnapshotStart                  // a snapshot begins
	evSnapshotEnd                    // the snapshot ended (however)
	evPauseStart                     // a pause begins
	evPaused                         // the pause's image is kept
	evPauseFailed                    // the pause failed; the VM runs on
	evResumeStart                    // a resume begins
	evResumed                        // the resumed VM's agent answered
	evResumeFailed                   // the resume failed; the image stays
	evVMExited                       // the VM ended without being asked
	evDelete                         // destroy begins
	evDeleted                        // destroy is done
	numLifeEvents
)

var lifeEventNames = [numLifeEvents]string{"booted", "cell start", "cell end", "snapshot start", "snapshot end",
	"pause start", "paused", "pause failed", "resume start", "resumed", "resume failed", "vm exited", "delete", "deleted"}

func (e lifeEvent) String() string {
	if e < numLifeEvents {
		return lifeEventNames[e]
	}
	return fmt.Sprintf("event(%d)", e)
}

// moves is the table: moves[from][event] is where the event takes a
// sandbox in phase from; a missing entry is an illegal move. The ends
// that arrive after a VM was lost or a delete began (a cell's, a
// snapshot's) keep the phase: the VM's exit or the delete already
// settled it.
var moves = [numPhases]map[lifeEvent]phase{
	phaseStarting: {evBooted: phaseRunning, evVMExited: phaseLost, evDelete: phaseDeleting},
	phaseRunning: {evCellStart: phaseCell, evSnapshotStart: phaseSnapshotting, evPauseStart: phasePausing,
		evVMExited: phaseLost, evDelete: phaseDeleting},
	phaseCell:         {evCellEnd: phaseRunning, evVMExited: phaseLost, evDelete: phaseDeleting},
	phaseSnapshotting: {evSnapshotEnd: phaseRunning, evVMExited: phaseLost, evDelete: phaseDeleting},
	phasePausing:      {evPaused: phasePaused, evPauseFailed: phaseRunning, evVMExited: phaseLost, evDelete: phaseDeleting},
	phasePaused:       {evResumeStart: phaseResuming, evVMExited: phaseLost, evDelete: phaseDeleting},
	phaseResuming:     {evResumed: phaseRunning, evResumeFailed: phasePaused, evVMExited: phaseLost, evDelete: phaseDeleting},
	phaseLost:         {evCellEnd: phaseLost, evSnapshotEnd: phaseLost, evDelete: phaseDeleting},
	phaseDeleting:     {evCellEnd: phaseDeleting, evSnapshotEnd: phaseDeleting, evDeleted: phaseDeleted},
	phaseDeleted:      {},
}

// next is the phase event takes from to, or an error naming both when
// the move is illegal.
func next(from phase, ev lifeEvent) (phase, error) {
	if from >= numPhases || ev >= numLifeEvents {
		return from, fmt.Errorf("sandbox lifecycle: %v in %v: unknown", ev, from)
	}
	to, ok := moves[from][ev]
	if !ok {
		return from, fmt.Errorf("sandbox lifecycle: %v refused in phase %v", ev, from)
	}
	return to, nil
}

// lifecycle holds a sandbox's phase. Its methods are safe for concurrent
// use; s.life still serialises the long moves (pause, resume, destroy),
// and the phase lets everyone else see where they are.
type lifecycle struct {
	mu sync.Mutex
	p  phase
	// calls counts the calls going on beside cells (commands, uploads,
	// downloads: hold). They need the guest's connection, which a pause
	// ends and a snapshot resets, so while any runs both are refused
	// (errCallsRunning), as they are while a cell runs.
	calls int
}

// errCallsRunning is move's error for a pause or a snapshot while a held
// call (a command, an upload, a download) runs.
var errCallsRunning = errors.New("sandbox lifecycle: a command or a file transfer is running")

// move applies ev and returns the phase it left, or an error (the phase
// unchanged) when ev is illegal there.
func (l *lifecycle) move(ev lifeEvent) (from phase, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	to, err := next(l.p, ev)
	if err != nil {
		return l.p, err
	}
	if l.calls > 0 && (ev == evPauseStart || ev == evSnapshotStart) {
		return l.p, errCallsRunning
	}
	from, l.p = l.p, to
	return from, nil
}

// hold counts a call that goes on beside cells while the VM runs, so no
// pause or snapshot starts until release is called; ok is false (and
// nothing held) when the sandbox is not running now: a pause began since
// the caller looked (it waits for it, resumes and holds again), or a
// snapshot is being taken (from says which).
func (l *lifecycle) hold() (release func(), from phase, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.p != phaseRunning && l.p != phaseCell {
		return nil, l.p, false
	}
	l.calls++
	return sync.OnceFunc(func() {
		l.mu.Lock()
		l.calls--
		l.mu.Unlock()
	}), l.p, true
}

// held reports whether a held call runs.
func (l *lifecycle) held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls > 0
}

// phase is the current phase.
func (l *lifecycle) phase() phase {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.p
}

// adopt sets the phase of a sandbox taken back from an earlier daemon
// (recover), before anyone else sees it.
func (l *lifecycle) adopt(p phase) {
	l.mu.Lock()
	l.p = p
	l.mu.Unlock()
}
