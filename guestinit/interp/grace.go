package interp

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// The grace period after SIGINT, measured in the time the interpreter could
// act on the signal, not in wall time.
//
// Python runs a signal handler only when its main thread gets back to the
// bytecode loop. A wall-clock grace (the supervisor's first design: 2 s
// from the signal) therefore also counts time in which the interpreter
// could not have taken the signal whatever the cell did:
//
//   - the guest's CPU went to others: the processes the cell started
//     (killed just before the signal, but still exiting: a large one frees
//     its memory for a while), the supervisor, the agent, the kernel;
//   - the whole VM was not running: a loaded host, or the rig's nested
//     emulation, where a vCPU thread of L2 waits behind L1's;
//   - the main thread was in uninterruptible sleep (D): paging in the
//     shared objects of a long C-level import (numpy, pandas, matplotlib)
//     from a virtio disk whose host is busy, or reclaiming memory.
//
// On a quiet machine 2 s is ample; under load the same honest cell (a long
// import or a busy loop that would have stopped at the next bytecode)
// could spend the whole 2 s waiting, be killed, and lose every variable.
// That is the most likely story of the seed program that lost its state
// under load while every probe on a quiet host kept it (issue 25).
//
// So the grace is credited, sample by sample, only with time the
// interpreter could have used: the CPU time its main thread actually got
// (R, D, anything), plus, while it slept interruptibly (S), the wall time,
// since a signal wakes such a sleeper at once (if it then goes back to
// sleep, a C loop retrying on EINTR, it had its chance). The cell is
// killed once the credit reaches the grace, or in any case graceHardCap
// after the signal, so that a starved interpreter still ends well inside
// the host's own deadline for the call (the cell's timeout plus 15 s). A
// cell that ignores SIGINT and spins (the common hostile case) gets CPU
// and is killed after about the grace, as before.

// graceSamplePeriod is how often the interpreter is sampled while a grace
// runs.
const graceSamplePeriod = 50 * time.Millisecond

// maxSampleCredit bounds what one sample may credit, however far apart it
// and the last are. A gap far longer than the period means the supervisor
// itself did not run: most often the whole VM was stopped (a loaded host,
// the rig's nested emulation). The guest's clock then jumps, and its
// scheduler charges the jump to whichever thread was running, a spinning
// interpreter's main thread included, as CPU time it never had: without
// this bound, one frozen second after a SIGINT was a second of grace
// spent, and a `while True: pass` that would have stopped at its next
// bytecode was killed with its variables (TestGuestNotebook's "timeout
// keeps state", 4.4 s for a 2 s timeout, in a loaded rig). Time the
// supervisor cannot see is not credited; the hard cap still ends it.
const maxSampleCredit = 4 * graceSamplePeriod

// graceHardCap is the longest a grace of g may last in wall time.
func graceHardCap(g time.Duration) time.Duration {
	return g + 6*time.Second
}

// threadSample is what /proc says about the interpreter's main thread at
// one moment.
type threadSample struct {
	at    time.Time
	ok    bool          // false: /proc could not be read (the grace then counts wall time)
	state byte          // R, S, D, ...
	cpu   time.Duration // the main thread's CPU time so far
}

// graceClock runs one grace period.
type graceClock struct {
	grace, hardCap time.Duration
	start          time.Time
	last           threadSample
	credit         time.Duration
}

func newGraceClock(grace time.Duration, first threadSample) *graceClock {
	return &graceClock{grace: grace, hardCap: graceHardCap(grace), start: first.at, last: first}
}

// observe takes a new sample and reports whether the grace is over.
func (g *graceClock) observe(s threadSample) bool {
	wall := min(max(s.at.Sub(g.last.at), 0), maxSampleCredit)
	switch {
	case !s.ok || !g.last.ok:
		g.credit += wall
	case g.last.state == 'S':
		g.credit += wall
	default:
		if d := s.cpu - g.last.cpu; d > 0 {
			g.credit += min(d, wall+10*time.Millisecond) // tick granularity
		}
	}
	g.last = s
	return g.credit >= g.grace || s.at.Sub(g.start) >= g.hardCap
}

// next is when the next sample is due: a period after the last, sooner
// when less credit than that is missing, and no later than the hard cap.
// Output wakes the poll loop far more often; sampling only when due
// keeps a cell that floods its output from costing a /proc read a write.
func (g *graceClock) next() time.Time {
	step := max(time.Millisecond, min(graceSamplePeriod, g.grace-g.credit))
	return minTime(g.last.at.Add(step), g.start.Add(g.hardCap))
}

// due says whether a sample is due at now.
func (g *graceClock) due(now time.Time) bool { return !now.Before(g.next()) }

// wait is how long the poll loop may sleep before the next sample.
func (g *graceClock) wait(now time.Time) time.Duration { return max(0, g.next().Sub(now)) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sampleThread reads the main thread (tid == pid) of pid.
func sampleThread(pid int) threadSample {
	s := threadSample{at: time.Now()}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return s
	}
	state, cpu, ok := parseThreadStat(b)
	if !ok {
		return s
	}
	s.ok, s.state, s.cpu = true, state, cpu
	// schedstat's first field is the thread's time on a CPU in ns, finer
	// than stat's clock ticks; absent without CONFIG_SCHED_INFO.
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if f := bytes.Fields(b); len(f) > 0 {
			if ns, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil && ns >= 0 {
				s.cpu = time.Duration(ns)
			}
		}
	}
	return s
}

// clockTick is USER_HZ, the unit of utime and stime: 100 on every Linux
// architecture the guest runs on.
const clockTick = 10 * time.Millisecond

// parseThreadStat reads the state and utime+stime of a /proc stat line.
// The command name may hold spaces and parentheses, so fields are counted
// from the last ')'.
func parseThreadStat(b []byte) (state byte, cpu time.Duration, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+2:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
	st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil || ut < 0 || st < 0 || ut > 1<<40 || st > 1<<40 {
		return 0, 0, false
	}
	return f[0][0], time.Duration(ut+st) * clockTick, true
}
