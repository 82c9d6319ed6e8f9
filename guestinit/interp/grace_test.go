package interp

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
)

// TestGraceClockCreditsOnlyUsableTime: the grace after SIGINT counts the
// CPU the interpreter's main thread got and the time it slept
// interruptibly, not time starved of CPU or in uninterruptible sleep; the
// hard cap ends it in any case.
func TestGraceClockCreditsOnlyUsableTime(t *testing.T) {
	const grace = 2 * time.Second
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	// run feeds samples every 50 ms from state and cpu(i) until the clock
	// says over; it returns the wall time at which it did.
	run := func(state byte, ok bool, cpu func(i int) time.Duration) time.Duration {
		g := newGraceClock(grace, threadSample{at: t0, ok: ok, state: state})
		for i := 1; i < 1000; i++ {
			d := time.Duration(i) * graceSamplePeriod
			if g.observe(threadSample{at: at(d), ok: ok, state: state, cpu: cpu(i)}) {
				return d
			}
		}
		t.Fatal("never over")
		return 0
	}
	spinning := func(i int) time.Duration { return time.Duration(i) * graceSamplePeriod }
	none := func(int) time.Duration { return 0 }
	half := func(i int) time.Duration { return time.Duration(i) * graceSamplePeriod / 2 }
	for _, tc := range []struct {
		name  string
		state byte
		ok    bool
		cpu   func(int) time.Duration
		want  time.Duration
	}{
		{"spins with the CPU to itself", 'R', true, spinning, grace},
		{"sleeps interruptibly (ignores SIGINT in a C loop)", 'S', true, none, grace},
		{"gets half the CPU", 'R', true, half, 2 * grace},
		{"runnable but starved (a loaded host)", 'R', true, none, graceHardCap(grace)},
		{"uninterruptible sleep (a C-level import paging in)", 'D', true, none, graceHardCap(grace)},
		{"stopped", 'T', true, none, graceHardCap(grace)},
		{"no /proc: wall time", 'R', false, none, grace},
	} {
		if got := run(tc.state, tc.ok, tc.cpu); got != tc.want {
			t.Errorf("%s: over after %v, want %v", tc.name, got, tc.want)
		}
	}

	// A gap far longer than the sampling period (the VM was stopped, and
	// the guest charged the jump of its clock to the spinning thread as
	// CPU) credits at most maxSampleCredit, whatever the thread's state.
	for _, state := range []byte{'R', 'S'} {
		g := newGraceClock(grace, threadSample{at: t0, ok: true, state: state})
		if g.observe(threadSample{at: at(3 * time.Second), ok: true, state: state, cpu: 3 * time.Second}) {
			t.Errorf("%c: a 3 s freeze right after the SIGINT ended the grace", state)
		}
		if g.credit > maxSampleCredit+clockTick {
			t.Errorf("%c: credit %v after one frozen gap, want at most %v", state, g.credit, maxSampleCredit)
		}
	}

	// A CPU jump larger than the interval (a coarse tick) is not credited
	// past the interval.
	g := newGraceClock(grace, threadSample{at: t0, ok: true, state: 'R'})
	g.observe(threadSample{at: at(50 * time.Millisecond), ok: true, state: 'R', cpu: time.Hour})
	if g.credit > 60*time.Millisecond {
		t.Errorf("credit %v after one 50 ms sample", g.credit)
	}
	// Samples are due once a period, or sooner near the end.
	if g.due(at(60*time.Millisecond)) || !g.due(at(100*time.Millisecond)) {
		t.Errorf("due: next sample at %v", g.next().Sub(t0))
	}
	if w := g.wait(at(60 * time.Millisecond)); w != 40*time.Millisecond {
		t.Errorf("wait = %v, want 40ms", w)
	}
}

func TestParseThreadStat(t *testing.T) {
	line := "123 (py) thon (x)) S 1 123 123 0 -1 4194560 1000 0 0 0 250 17 0 0 20 0 1 0 100 0 0\n"
	state, cpu, ok := parseThreadStat([]byte(line))
	if !ok || state != 'S' || cpu != 267*clockTick {
		t.Errorf("got %c %v %v, want S 2.67s true", state, cpu, ok)
	}
	for _, bad := range []string{"", "123 (x", "123 (x) S 1 2", "123 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12 13",
		"123 (x) R 1 2 3 4 5 6 7 8 9 10 -5 12 13", "123 (x) R 1 2 3 4 5 6 7 8 9 10 99999999999999999999 12 13"} {
		if _, _, ok := parseThreadStat([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
	s := sampleThread(os.Getpid())
	if !s.ok || s.state == 0 || s.cpu <= 0 {
		t.Errorf("sample of this process's main thread: %+v", s)
	}
	if s := sampleThread(1 << 30); s.ok {
		t.Errorf("sample of no process: %+v", s)
	}
}

// TestGraceWaitsForAStarvedInterpreter: an interpreter that cannot run
// when its cell times out (stopped here, as a vCPU of a loaded host or a
// thread paging in a C extension is in effect) is not killed when a wall
// clock's grace would have ended: once it runs again it takes the
// interrupt, and its variables are kept. Before the grace counted usable
// time, it was killed and every variable lost (this test failed).
func TestGraceWaitsForAStarvedInterpreter(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil) // grace 500ms
	expectOK(t, run(t, in, "x = 1"))
	pid := in.p.pid
	done := make(chan cell.Result, 1)
	go func() { done <- runT(t, in, "import time\nwhile True: time.sleep(0.01)", 300*time.Millisecond) }()
	time.Sleep(150 * time.Millisecond) // the cell runs
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * in.cfg.Grace) // the timeout and a wall-clock grace pass
	contErr := unix.Kill(pid, unix.SIGCONT)
	res := <-done
	if contErr != nil {
		t.Fatalf("the interpreter was killed while it could not run (SIGCONT: %v): the grace counted time it had no CPU; result %+v", contErr, res.Error)
	}
	if res.Status != cell.StatusTimeout || !res.StateKept || res.KilledBy != cell.KilledByTimeout {
		t.Fatalf("starved interpreter: status %q state_kept %v killed_by %q, want a kept timeout: %+v", res.Status, res.StateKept, res.KilledBy, res.Error)
	}
	if got := mainText(t, run(t, in, "x")); got != "1" {
		t.Errorf("x = %s after the timeout", got)
	}
}

// TestIgnoredSIGINTIsKilledAndSaysSo: the cell, which ignores
// SIGINT and spins, is killed after about the grace (it has the CPU), and
// the result says so: status timeout, killed_by timeout, state_kept false;
// the next cell's NameError agrees.
func TestIgnoredSIGINTIsKilledAndSaysSo(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 1"))
	start := time.Now()
	res := runT(t, in, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", 300*time.Millisecond)
	if d := time.Since(start); d > graceHardCap(in.cfg.Grace) {
		t.Errorf("killed after %v: past the hard cap", d)
	}
	if res.Status != cell.StatusTimeout || res.KilledBy != cell.KilledByTimeout || res.StateKept {
		t.Fatalf("got status %q killed_by %q state_kept %v", res.Status, res.KilledBy, res.StateKept)
	}
	if res = run(t, in, "x"); res.Error == nil || res.Error.Name != "NameError" {
		t.Fatalf("the next cell: %+v, want a NameError", res)
	}
}
