package vmm

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A machine's life is one state, moved by events through one table
// (moves). Every place the life changes — Run starting the vCPU threads,
// Stop and the VM's own end, Pause and Resume, Save, Restore, Close — makes
// its move through next, which refuses a move the table does not hold with
// an error naming the state and the move, never a panic. Each caller says
// what a refusal means to it: a second end does nothing (the first end
// wins), a second Close returns nil, a Pause of a machine that does not run
// returns ErrNotRunning. The models are Cloud Hypervisor's
// VmState::valid_transition, and Firecracker's VmmAction handling, which
// checks each action against the VM's state before it acts.

// machineState is where a machine is in its life. What the lifecycle's
// fields (and the machine's vCPUs and devices) mean in each state:
//
//   - built: New or Restore made the VM, its memory and its devices, and no
//     vCPU thread runs: vcpus is empty, or holds vCPUs whose threads have
//     not started (Run is setting them up, or it failed before the guest
//     ran, or Restore restored them). restored is the snapshot a Restore
//     built the machine from (nil for New): Run then carries the guest on
//     instead of booting it. req is nil; ended is open.
//   - running: Run started one thread per vCPU, and the threads are in or
//     around KVM_RUN. req is nil; ended is open.
//   - pausing: Pause (holding snap.op) has set req and kicked every vCPU,
//     and waits for each thread to park on req, then for every virtio
//     device to pause. It ends paused, or running again when a device
//     would not pause.
//   - paused: every vCPU thread is parked on req, outside KVM_RUN, running
//     only the work req sends it, and every virtio device is paused: the
//     machine stands still, and Save may read it. Resume releases req and
//     the machine runs.
//   - ended: the VM ended — the guest reset, a vCPU's exit failed, or the
//     host stopped it, before or after Run — and stays ended: ended is
//     closed, and endErr and endReason are the first end's. The vCPU
//     threads leave (a parked one too), and Run returns endErr. If it ended
//     while pausing or paused, its devices may stay paused and req may
//     stay set: nothing resumes an ended machine.
//   - closed: Close released everything the machine held; no field means
//     anything any more, and no move leaves closed.
type machineState uint8

const (
	stateBuilt machineState = iota // the zero value: a machine starts built
	stateRunning
	statePausing
	statePaused
	stateEnded
	stateClosed
	numStates
)

var stateNames = [numStates]string{"built", "running", "pausing", "paused", "ended", "closed"}

func (s machineState) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// machineEvent is what happens to a machine: one of its methods, or the
// VM's own end.
type machineEvent uint8

const (
	evRun         machineEvent = iota // Run starts the vCPU threads
	evPause                           // Pause kicks every vCPU to park it
	evPaused                          // every vCPU parked, every device paused
	evPauseFailed                     // a device would not pause: the vCPUs run on
	evResume                          // Resume releases the parked vCPUs
	evSave                            // Save reads the paused machine, which stays paused
	evRestore                         // Restore put a snapshot's state into the built machine
	evEnd                             // the VM ends: the guest, a failed exit, or Stop
	evClose                           // Close releases everything
	numEvents
)

var eventNames = [numEvents]string{"run", "pause", "paused", "pause-failed", "resume", "save", "restore", "end", "close"}

func (e machineEvent) String() string {
	if e < numEvents {
		return eventNames[e]
	}
	return fmt.Sprintf("event(%d)", uint8(e))
}

// moves is the table: for each event, the states it may happen in and the
// state it leads to. Close is refused while vCPU threads run (running,
// pausing, paused): it would close and unmap what they use, so the owner
// stops the machine and lets Run return first.
var moves = [numEvents]struct {
	from []machineState
	to   machineState
}{
	evRun:         {[]machineState{stateBuilt}, stateRunning},
	evPause:       {[]machineState{stateRunning}, statePausing},
	evPaused:      {[]machineState{statePausing}, statePaused},
	evPauseFailed: {[]machineState{statePausing}, stateRunning},
	evResume:      {[]machineState{statePaused}, stateRunning},
	evSave:        {[]machineState{statePaused}, statePaused},
	evRestore:     {[]machineState{stateBuilt}, stateBuilt},
	evEnd:         {[]machineState{stateBuilt, stateRunning, statePausing, statePaused}, stateEnded},
	evClose:       {[]machineState{stateBuilt, stateEnded}, stateClosed},
}

// refusedMove is next's error: event in state from is not in the table.
type refusedMove struct {
	from  machineState
	event machineEvent
}

func (r *refusedMove) Error() string {
	if r.event >= numEvents {
		return fmt.Sprintf("machine %s: unknown %s refused", r.from, r.event)
	}
	mv := moves[r.event]
	from := make([]string, len(mv.from))
	for i, s := range mv.from {
		from[i] = s.String()
	}
	return fmt.Sprintf("machine %s: %s refused (%s moves %s to %s)", r.from, r.event, r.event, strings.Join(from, " or "), mv.to)
}

// next is the state event e leads to from state s, or the refusal.
func next(s machineState, e machineEvent) (machineState, error) {
	if e >= numEvents || !slices.Contains(moves[e].from, s) {
		return s, &refusedMove{from: s, event: e}
	}
	return moves[e].to, nil
}

// lifecycle is a machine's state and the fields it gives a meaning to (see
// machineState).
type lifecycle struct {
	// mu guards state, endErr, endReason and req. The vCPU threads take it
	// in interrupted; Pause takes vcpuMu inside it, never the other way.
	// endErr and endReason are also read without it after ended is seen
	// closed, since they are written before it closes.
	mu        sync.Mutex
	state     machineState
	ended     chan struct{} // closed by the move into ended, and only by it
	endErr    error
	endReason string
	req       *pauseReq // this pause's, from Pause's kicks until Resume
	// restored is set by the restore move, before Run, and read by Run
	// without mu.
	restored *snapshot.State
}

// moveLocked makes event e's move from the machine's state, or refuses it,
// and says which state it was in; the caller holds life.mu.
func (m *Machine) moveLocked(e machineEvent) (from machineState, err error) {
	from = m.life.state
	to, err := next(from, e)
	if err != nil {
		return from, err
	}
	m.life.state = to
	return from, nil
}

// move is moveLocked taking life.mu.
func (m *Machine) move(e machineEvent) (from machineState, err error) {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	return m.moveLocked(e)
}

// may says whether event e may happen now, without moving.
func (m *Machine) may(e machineEvent) (from machineState, err error) {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	from = m.life.state
	_, err = next(from, e)
	return from, err
}
