package interp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
)

// stream collects one of the interpreter's output fds: clipped for the
// result, and streamed (its head) as events.
type stream struct {
	kind    cell.EventType
	clip    *cell.Clipper
	pending []byte // start of a UTF-8 character split by a read
}

// cellRun is one cell while it runs. Run's goroutine owns it; other
// goroutines reach it only through ask.
type cellRun struct {
	in      *Interp
	p       *proc
	n       int
	onEvent func(cell.Event)
	out     *stream
	errs    *stream
	buf     []byte // read buffer for the output pipes

	results      []cell.Display
	resultsBytes int
	droppedNote  bool
	pyErr        *cell.Error

	// st is the cell's lifecycle; only apply changes it.
	st cellState
	// grace is, while st is interrupting, the grace period that ends in
	// a kill (see grace.go); nil before the first interrupt.
	grace *graceClock
	// protoErr is what the driver broke, for the result's message.
	protoErr error

	// asked is a request from another goroutine (a cellAsk), taken by the
	// poll loop.
	asked atomic.Uint32
}

// cellAsk is what another goroutine asks of a running cell; a kill
// outranks an interrupt.
type cellAsk uint32

const (
	askNone      cellAsk = iota
	askInterrupt         // Interrupt
	askKill              // Restart or Close killed the interpreter
)

// ask records a request for the poll loop, keeping the stronger of two;
// the caller then wakes the loop. Safe from any goroutine.
func (r *cellRun) ask(a cellAsk) {
	for {
		old := r.asked.Load()
		if cellAsk(old) >= a || r.asked.CompareAndSwap(old, uint32(a)) {
			return
		}
	}
}

// apply moves the cell's state on e and does what the move calls for: a
// kill on entering killing (logged with its cause), SIGINT and the grace
// period on interrupting. A refused event changes nothing.
func (r *cellRun) apply(e cellEvent) {
	next, err := r.st.next(e)
	if err != nil {
		r.in.log.Debug("cell event ignored", "cell", r.n, "err", err)
		return
	}
	prev := r.st
	r.st = next
	switch {
	case next.phase == phaseKilling && prev.phase != phaseKilling:
		r.logKill(e)
		r.p.killAll(r.in.cg)
	case next.phase == phaseInterrupting && prev.phase != phaseInterrupting:
		r.startGrace()
		if !next.signalled {
			return // SIGINT waits for "started"
		}
		// What the cell started dies first (it would once the cell ended,
		// anyway): a fork bomb would otherwise keep the interpreter from
		// the CPU it needs to take the interrupt within the grace period,
		// which starts once they are gone (killing many can take a while).
		if r.in.cg != nil {
			if n := len(r.in.cg.killAllBut(r.p.pid)); n > 0 {
				r.in.log.Info("killed the processes of an interrupted cell before its SIGINT", "cell", r.n, "count", n)
				r.startGrace()
			}
		}
		r.p.interrupt()
	case next.phase == phaseInterrupting && next.signalled && !prev.signalled:
		// The interrupt came before "started": the signal goes now.
		r.startGrace()
		r.p.interrupt()
	}
}

// startGrace starts (or starts again) the grace period from now.
func (r *cellRun) startGrace() {
	r.grace = newGraceClock(r.in.cfg.Grace, sampleThread(r.p.pid))
}

// logKill says why the supervisor kills the interpreter (e moved the cell
// to killing), with what the grace period saw when that is the reason:
// every kill of an interpreter is in the guest's log with its cause. At
// most one a cell, so a guest cannot flood the log with them.
func (r *cellRun) logKill(e cellEvent) {
	args := []any{"cell", r.n, "cause", r.st.cause.String(), "event", e.String()}
	if e == evGraceOver && r.grace != nil {
		g := r.grace
		args = append(args, "grace", r.in.cfg.Grace, "since_signal", g.last.at.Sub(g.start).Round(time.Millisecond),
			"credited", g.credit.Round(time.Millisecond), "thread_state", string(rune(g.last.state)),
			"proc_readable", g.last.ok)
		if g.credit < g.grace {
			args = append(args, "why", "hard cap: the interpreter could not act on SIGINT (no CPU, or uninterruptible sleep)")
		} else {
			args = append(args, "why", "the cell did not stop within the grace period it could use (it ignores or defers SIGINT)")
		}
	}
	r.in.log.Info("killing the interpreter", args...)
}

// Run executes code as the next cell and returns its result. onEvent, if
// not nil, receives the streaming events in order, ending with EventEnd; it
// is called on Run's goroutine and should not block for long. timeout <= 0
// means no limit. Errors raised by the cell are results, not errors: Run
// returns an error only when the interpreter cannot be started, and with
// ctx's error when ctx ends the cell (the result is still filled in).
func (in *Interp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	return in.RunLanguage(ctx, in.rt.languages[0], code, timeout, onEvent)
}

// RunLanguage is Run for a cell in lang, one of the languages of the
// session's runtime (JavaScript or TypeScript in Node's); another is an
// error.
func (in *Interp) RunLanguage(ctx context.Context, lang cell.Language, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	if !in.rt.runs(lang) {
		return cell.Result{}, fmt.Errorf("a %s session does not run %s cells", in.rt.name, clipText(string(lang), 32))
	}
	if onEvent == nil {
		onEvent = func(cell.Event) {}
	}
	in.runMu.Lock()
	defer in.runMu.Unlock()
	if in.closed.Load() {
		return cell.Result{}, ErrClosed
	}
	start := time.Now()
	in.count++
	n := in.count
	if len(code) > in.cfg.MaxCodeBytes {
		res := cell.Result{
			Status:         cell.StatusError,
			ExecutionCount: n,
			StateKept:      true,
			Error: &cell.Error{
				Name:  "CellTooLarge",
				Value: fmt.Sprintf("the cell's code is %d bytes; the limit is %d", len(code), in.cfg.MaxCodeBytes),
			},
		}
		onEvent(cell.Event{Type: cell.EventError, Error: res.Error})
		onEvent(cell.Event{Type: cell.EventEnd, End: &res})
		return res, nil
	}
	if err := in.ensureStartedLocked(); err != nil {
		var pe *PythonError
		if errors.As(err, &pe) {
			// Not a crash: this image cannot run cells at all. Said as
			// the cell's error, so the sandbox stays usable for commands
			// and files.
			res := pe.result(n, !in.lostQuiet)
			res.DurationMS = time.Since(start).Milliseconds()
			onEvent(cell.Event{Type: cell.EventError, Error: res.Error})
			onEvent(cell.Event{Type: cell.EventEnd, End: &res})
			return res, nil
		}
		in.count--
		return cell.Result{}, fmt.Errorf("start interpreter: %w", err)
	}
	fresh := in.lostQuiet
	in.lostQuiet = false

	r := &cellRun{
		in:      in,
		p:       in.p,
		n:       n,
		onEvent: onEvent,
		out:     &stream{kind: cell.EventStdout, clip: cell.NewClipper(in.cfg.HeadBytes, in.cfg.TailBytes)},
		errs:    &stream{kind: cell.EventStderr, clip: cell.NewClipper(in.cfg.HeadBytes, in.cfg.TailBytes)},
		buf:     make([]byte, 64<<10),
	}
	if fresh {
		r.errs.write([]byte("cellvm: the interpreter had exited since the last cell; this cell ran in a fresh one and earlier variables are gone\n"), onEvent)
	}
	var oomBase int64
	if in.cg != nil {
		oomBase = in.cg.oomKills()
	}

	in.running.Store(r)
	defer in.running.Store(nil)
	stopAfter := context.AfterFunc(ctx, in.wakeUp)
	defer stopAfter()

	exitedEarly := false
	if err := r.p.send(command{Op: "exec", N: n, Code: code, Lang: in.langField(lang)}); err != nil {
		in.log.Warn("interpreter unreachable; killing it", "cell", n, "err", err)
		r.p.killGroup()
		exitedEarly = true
	}
	if !exitedEarly {
		r.loop(ctx, timeout)
	}

	res := r.finish(oomBase)
	res.ExecutionCount = n
	res.DurationMS = time.Since(start).Milliseconds()
	if fresh {
		res.StateKept = false
	}
	if res.Error != nil {
		onEvent(cell.Event{Type: cell.EventError, Error: res.Error})
	}
	onEvent(cell.Event{Type: cell.EventEnd, End: &res})
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, nil
}

// loop polls the interpreter's pipes until the cell is done or the
// interpreter is gone.
func (r *cellRun) loop(ctx context.Context, timeout time.Duration) {
	in, p := r.in, r.p
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	pfds := []unix.PollFd{
		{Fd: int32(p.outFD), Events: unix.POLLIN},
		{Fd: int32(p.errFD), Events: unix.POLLIN},
		{Fd: int32(p.evFD), Events: unix.POLLIN},
		{Fd: int32(in.wakeFD), Events: unix.POLLIN},
	}
	end := framesMore
	for {
		wait := -1
		now := time.Now()
		switch r.st.phase {
		case phaseSent, phaseRunning:
			if !deadline.IsZero() {
				wait = msUntil(now, deadline)
			}
		case phaseInterrupting:
			wait = msUntil(now, now.Add(r.grace.wait(now)))
		}
		for i := range pfds {
			pfds[i].Revents = 0
		}
		if _, err := unix.Poll(pfds, wait); err != nil && err != unix.EINTR {
			in.log.Error("poll failed; killing interpreter", "err", err)
			r.apply(evFailure)
		}
		if pfds[3].Revents != 0 {
			in.clearWake()
		}

		// Output first, so a result or the end follows what was printed
		// before it.
		for i, s := range []*stream{r.out, r.errs} {
			if pfds[i].Revents&unix.POLLIN != 0 {
				if eof := r.readOnce(pfds[i].Fd, s); eof {
					pfds[i].Fd = -1
				}
			} else if pfds[i].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
				pfds[i].Fd = -1
			}
		}
		if pfds[2].Revents != 0 {
			if err := p.ev.fill(); err != nil {
				pfds[2].Fd = -1 // the driver closed its end: it is dying
			}
			end = r.handleFrames()
		}
		if end != framesMore {
			break
		}
		if p.exited.Load() {
			// Take what it sent before dying (bounded: a leaked copy of
			// the pipe could keep it open).
			for range 64 {
				err := p.ev.fill()
				end = r.handleFrames()
				if err != nil || end != framesMore {
					break
				}
			}
			break
		}

		now = time.Now()
		live := r.st.phase == phaseSent || r.st.phase == phaseRunning
		switch ask := cellAsk(r.asked.Swap(uint32(askNone))); {
		case ask == askKill:
			r.apply(evRestart)
		case live && (ask == askInterrupt || ctx.Err() != nil):
			r.apply(evInterrupt)
		case live && !deadline.IsZero() && !now.Before(deadline):
			r.apply(evTimeout)
		case r.st.phase == phaseInterrupting && r.grace.due(now) && r.grace.observe(sampleThread(p.pid)):
			r.apply(evGraceOver)
		}
	}
	if end == framesDone {
		r.drainOutput()
	}
}

func msUntil(now, t time.Time) int {
	d := t.Sub(now)
	if d <= 0 {
		return 0
	}
	return int(d/time.Millisecond) + 1
}

// readOnce reads what one output fd has and reports end of file.
func (r *cellRun) readOnce(fd int32, s *stream) bool {
	n, err := unix.Read(int(fd), r.buf)
	if n > 0 {
		s.write(r.buf[:n], r.onEvent)
		return false
	}
	return n == 0 && err == nil
}

// drainOutput reads everything already in the output pipes. Once the
// driver has said "done", all it wrote before is in the pipes.
func (r *cellRun) drainOutput() {
	for _, x := range []struct {
		fd int
		s  *stream
	}{{r.p.outFD, r.out}, {r.p.errFD, r.errs}} {
		drainInto(x.fd, writerFunc(func(b []byte) (int, error) {
			x.s.write(b, r.onEvent)
			return len(b), nil
		}), r.buf)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// write records output and streams the part that fits in the head.
func (s *stream) write(b []byte, onEvent func(cell.Event)) {
	room := s.clip.HeadRoom()
	s.clip.Write(b)
	if room <= 0 {
		return
	}
	show := b[:min(room, len(b))]
	text := append(s.pending, show...)
	k := cell.PartialRuneLen(text)
	if len(show) < len(b) {
		k = 0 // the head ends here: nothing more will follow
	}
	s.pending = append([]byte(nil), text[len(text)-k:]...)
	if len(text)-k > 0 {
		onEvent(cell.Event{Type: s.kind, Text: strings.ToValidUTF8(string(text[:len(text)-k]), "\uFFFD")})
	}
}

// framesEnd says whether more of a cell's frames may follow.
type framesEnd uint8

const (
	framesMore     framesEnd = iota
	framesDone               // the driver's "done": the cell's last frame
	framesProtocol           // the driver broke the protocol
)

// handleFrames processes the buffered frames from the driver, up to the
// cell's last.
func (r *cellRun) handleFrames() framesEnd {
	for {
		f, ok, err := r.p.ev.next()
		if err != nil {
			r.protoErr = err
			r.in.log.Warn("interpreter broke the protocol; killing it", "err", err)
			r.apply(evProtocol)
			return framesProtocol
		}
		if !ok {
			return framesMore
		}
		// Output written before this frame is already in the pipes.
		r.drainOutput()
		switch f.Ev {
		case "started":
			r.apply(evStarted)
		case "result":
			r.addResult(f)
		case "error":
			r.pyErr = &cell.Error{Name: plain(f.Name), Value: plain(f.Value), Traceback: plainAll(f.Traceback)}
		case "done":
			if f.Status == "error" {
				r.apply(evDoneError)
			} else {
				r.apply(evDoneOK)
			}
			return framesDone
		}
	}
}

func (r *cellRun) addResult(f frame) {
	if len(f.Data) == 0 {
		return
	}
	size := 0
	for k, v := range f.Data {
		size += len(k) + len(v)
	}
	if r.resultsBytes+size > r.in.cfg.MaxResultsBytes {
		if !r.droppedNote {
			r.droppedNote = true
			r.errs.write([]byte(fmt.Sprintf("cellvm: rich results past %d bytes were dropped\n", r.in.cfg.MaxResultsBytes)), r.onEvent)
		}
		return
	}
	r.resultsBytes += size
	d := cell.Display{Main: f.Main, Data: f.Data}
	if d.Main {
		// Only one main result; a hostile driver could claim more.
		for _, prev := range r.results {
			if prev.Main {
				d.Main = false
			}
		}
	}
	r.results = append(r.results, d)
	r.onEvent(cell.Event{Type: cell.EventResult, Result: &r.results[len(r.results)-1]})
}

// finish turns what happened into the cell's Result, cleaning up after
// an interrupted cell or a dead interpreter.
func (r *cellRun) finish(oomBase int64) cell.Result {
	in := r.in
	signaled, how := false, ""
	if r.st.phase != phaseDone {
		// The interpreter is gone (or being killed): take its last output
		// and replace it. A kill here, for one that still runs, is not the
		// supervisor's decision the result reports.
		if r.st.phase != phaseKilling {
			in.log.Info("the interpreter ended during the cell; killing what it left", "cell", r.n, "phase", r.st.phase.String())
			r.p.killAll(in.cg)
		}
		<-r.p.exitCh
		r.drainOutput()
		st := in.stopLocked()
		signaled, how = describeExit(st)
		if (in.cg != nil && in.cg.oomKills() > oomBase) || r.outOfHeap(st) {
			r.apply(evOOMKilled)
		} else {
			r.apply(evExited)
		}
	}
	d := r.st
	res := cell.Result{Results: r.results, Status: d.status, StateKept: d.kept}
	if d.kept {
		res.Error = r.pyErr
		if d.cause != causeNone {
			in.killStrays(r.p)
		}
		if d.status == cell.StatusTimeout {
			res.KilledBy = cell.KilledByTimeout
			res.Error = &cell.Error{
				Name:  "TimeoutError",
				Value: "the cell ran past its time limit and was interrupted; variables and imports are kept",
			}
			if r.pyErr != nil {
				res.Error.Traceback = r.pyErr.Traceback
			}
		}
	} else {
		switch d.cause {
		case causeTimeout:
			res.KilledBy = cell.KilledByTimeout
			res.Error = &cell.Error{
				Name: "TimeoutError",
				Value: fmt.Sprintf("the cell ran past its time limit and did not stop within %v of the interrupt; "+
					"the interpreter was killed and restarted, so all variables and imports are lost", in.cfg.Grace),
			}
		case causeOOM:
			res.KilledBy = cell.KilledByOOM
			res.Error = &cell.Error{
				Name: "OutOfMemory",
				Value: "the interpreter ran out of memory and was killed; it was restarted, " +
					"so all variables and imports are lost. Use less memory (smaller data, chunks, del large objects).",
			}
		case causeRestart:
			res.KilledBy = cell.KilledBySignal
			res.Error = &cell.Error{Name: "InterpreterLost", Value: "the interpreter was restarted during the cell; all variables and imports are lost"}
		case causeInterrupt:
			res.KilledBy = cell.KilledBySignal
			res.Error = &cell.Error{
				Name:  "KeyboardInterrupt",
				Value: fmt.Sprintf("the cell did not stop within %v of the interrupt; the interpreter was killed and restarted, so all variables and imports are lost", in.cfg.Grace),
			}
		case causeProtocol:
			res.KilledBy = cell.KilledBySignal
			res.Error = &cell.Error{Name: "InterpreterLost", Value: fmt.Sprintf("the interpreter broke the supervisor protocol (%v) and was restarted; all variables and imports are lost", r.protoErr)}
		default:
			if signaled {
				res.KilledBy = cell.KilledBySignal
			}
			res.Error = &cell.Error{
				Name:  "InterpreterLost",
				Value: fmt.Sprintf("the %s interpreter %s during the cell; it will be restarted for the next cell and all variables and imports are lost", runtimeTitle(in.rt.name), how),
			}
			if r.pyErr != nil {
				res.Error.Traceback = r.pyErr.Traceback
			}
		}
	}
	res.Stdout, res.Truncated.StdoutBytes = r.out.clip.Text()
	res.Stderr, res.Truncated.StderrBytes = r.errs.clip.Text()
	return res
}

// killStrays kills the processes a cell started and left behind after it
// was interrupted, keeping the interpreter, and reaps them.
func (in *Interp) killStrays(p *proc) {
	var killed []int
	if in.cg != nil {
		killed = in.cg.killAllBut(p.pid)
	}
	for range 5 {
		var extra []int
		if in.cg != nil {
			extra = in.cg.procs()
		}
		var live []int
		for _, pid := range strayProcs(p.pid, extra) {
			if procAlive(pid) {
				live = append(live, pid)
			}
		}
		if len(live) == 0 {
			break
		}
		for _, pid := range live {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		killed = append(killed, live...)
		time.Sleep(5 * time.Millisecond)
	}
	if len(killed) == 0 {
		return
	}
	in.log.Info("killed processes left by an interrupted cell", "count", len(killed))
	// Wait for them to die, then let the driver collect its children.
	deadline := time.Now().Add(time.Second)
	for _, pid := range killed {
		for time.Now().Before(deadline) {
			st, ok := readProcStat(pid)
			if !ok || st.state == 'Z' {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if err := in.reapInDriver(p); err != nil {
		in.log.Warn("driver could not reap children", "err", err)
	}
	reapOrphans(killed, 200*time.Millisecond)
}

// reapInDriver asks the driver to wait for its dead children.
func (in *Interp) reapInDriver(p *proc) error {
	_, err := askDriver(p, "reap", "reaped", 2*time.Second)
	return err
}

// askDriver sends the driver a command that is not a cell and waits, up to
// wait, for its answer frame (ev want).
func askDriver(p *proc, op, want string, wait time.Duration) (frame, error) {
	if err := p.send(command{Op: op}); err != nil {
		return frame{}, err
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for {
			f, ok, err := p.ev.next()
			if err != nil {
				return frame{}, err
			}
			if !ok {
				break
			}
			if f.Ev == want {
				return f, nil
			}
		}
		pfds := []unix.PollFd{{Fd: int32(p.evFD), Events: unix.POLLIN}}
		if _, err := unix.Poll(pfds, 100); err != nil && err != unix.EINTR {
			return frame{}, fmt.Errorf("poll: %w", err)
		}
		if err := p.ev.fill(); err != nil {
			return frame{}, err
		}
	}
	return frame{}, fmt.Errorf("no reply to %s", op)
}

func plain(s string) string {
	if !strings.ContainsRune(s, 0x1b) {
		return s
	}
	return stripANSI(s)
}

func plainAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = plain(s)
	}
	return out
}

// stripANSI removes terminal escape sequences (CSI and two-byte ESC
// sequences) and any stray ESC.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j // skip through the final byte
			continue
		}
		if i+1 < len(s) && s[i+1] >= 0x40 && s[i+1] <= 0x5f {
			i++
		}
	}
	return b.String()
}
