package interp

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
)

// stopCause is why the supervisor asked a cell to stop.
type stopCause int

const (
	causeNone stopCause = iota
	causeTimeout
	causeInterrupt // Interrupt() or a cancelled context
)

// stream collects one of the interpreter's output fds: clipped for the
// result, and streamed (its head) as events.
type stream struct {
	kind    cell.EventType
	clip    *cell.Clipper
	pending []byte // start of a UTF-8 character split by a read
}

// cellRun is the state of one cell while it runs.
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
	done         bool
	doneStatus   string

	started    bool // the driver has begun the cell: SIGINT may be sent
	sigPending bool // an interrupt waits for started
	graceEnd   time.Time

	cause     stopCause
	killed    bool // the supervisor killed the interpreter
	protoErr  error
	restarted bool // Restart or Close killed the interpreter
}

// Run executes code as the next cell and returns its result. onEvent, if
// not nil, receives the streaming events in order, ending with EventEnd; it
// is called on Run's goroutine and should not block for long. timeout <= 0
// means no limit. Errors raised by the cell are results, not errors: Run
// returns an error only when the interpreter cannot be started, and with
// ctx's error when ctx ends the cell (the result is still filled in).
func (in *Interp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
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

	in.interruptReq.Store(false)
	in.killReq.Store(false)
	in.running.Store(true)
	defer in.running.Store(false)
	stopAfter := context.AfterFunc(ctx, in.wakeUp)
	defer stopAfter()

	exitedEarly := false
	if err := r.p.send(command{Op: "exec", N: n, Code: code}); err != nil {
		in.log.Warn("interpreter unreachable", "err", err)
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
	for {
		wait := -1
		now := time.Now()
		if r.cause == causeNone && !deadline.IsZero() {
			wait = msUntil(now, deadline)
		}
		if r.cause != causeNone && !r.killed {
			wait = msUntil(now, r.graceEnd)
		}
		for i := range pfds {
			pfds[i].Revents = 0
		}
		if _, err := unix.Poll(pfds, wait); err != nil && err != unix.EINTR {
			in.log.Error("poll failed; killing interpreter", "err", err)
			r.kill()
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
			r.handleFrames()
		}
		if r.done || r.protoErr != nil {
			break
		}
		if p.exited.Load() {
			// Take what it sent before dying (bounded: a leaked copy of
			// the pipe could keep it open).
			for range 64 {
				err := p.ev.fill()
				r.handleFrames()
				if err != nil || r.done || r.protoErr != nil {
					break
				}
			}
			break
		}

		now = time.Now()
		switch {
		case in.killReq.Load():
			r.restarted = true
			r.kill()
		case r.cause == causeNone && in.interruptReq.Swap(false):
			r.interrupt(causeInterrupt, now)
		case r.cause == causeNone && ctx.Err() != nil:
			r.interrupt(causeInterrupt, now)
		case r.cause == causeNone && !deadline.IsZero() && !now.Before(deadline):
			r.interrupt(causeTimeout, now)
		case r.cause != causeNone && !r.killed && !now.Before(r.graceEnd):
			in.log.Info("cell ignored SIGINT; killing interpreter", "cell", r.n, "grace", in.cfg.Grace)
			r.kill()
		}
	}
	if r.protoErr != nil {
		in.log.Warn("interpreter broke the protocol; killing it", "err", r.protoErr)
		r.kill()
	}
	if r.done {
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

// interrupt asks the cell to stop with SIGINT and starts the grace period.
// Before the driver has said "started", the signal waits for it.
func (r *cellRun) interrupt(c stopCause, now time.Time) {
	r.cause = c
	r.graceEnd = now.Add(r.in.cfg.Grace)
	if !r.started {
		r.sigPending = true
		return
	}
	// What the cell started dies first (it would once the cell ended,
	// anyway): a fork bomb would otherwise keep the interpreter from the
	// CPU it needs to take the interrupt within the grace period, which
	// starts once they are gone (killing many can take a while).
	if r.in.cg != nil && len(r.in.cg.killAllBut(r.p.pid)) > 0 {
		r.graceEnd = time.Now().Add(r.in.cfg.Grace)
	}
	r.p.signal(unix.SIGINT)
}

func (r *cellRun) kill() {
	if !r.killed {
		r.killed = true
		r.p.killAll(r.in.cg)
	}
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

// handleFrames processes the buffered frames from the driver.
func (r *cellRun) handleFrames() {
	for !r.done {
		f, ok, err := r.p.ev.next()
		if err != nil {
			r.protoErr = err
			return
		}
		if !ok {
			return
		}
		// Output written before this frame is already in the pipes.
		r.drainOutput()
		switch f.Ev {
		case "started":
			if !r.started {
				r.started = true
				if r.sigPending && !r.killed {
					r.sigPending = false
					r.graceEnd = time.Now().Add(r.in.cfg.Grace)
					r.p.signal(unix.SIGINT)
				}
			}
		case "result":
			r.addResult(f)
		case "error":
			r.pyErr = &cell.Error{Name: plain(f.Name), Value: plain(f.Value), Traceback: plainAll(f.Traceback)}
		case "done":
			r.done = true
			r.doneStatus = f.Status
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
	res := cell.Result{Results: r.results}
	if r.done && !r.killed {
		res.StateKept = true
		res.Error = r.pyErr
		res.Status = cell.StatusOK
		if r.doneStatus == "error" {
			res.Status = cell.StatusError
		}
		if r.cause != causeNone {
			in.killStrays(r.p)
		}
		if r.cause == causeTimeout {
			res.Status = cell.StatusTimeout
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
		// The interpreter is gone (or being killed): take its last output
		// and replace it.
		killedHere := r.killed
		r.kill()
		r.killed = killedHere
		<-r.p.exitCh
		r.drainOutput()
		st := in.stopLocked()
		signaled, how := describeExit(st)
		res.StateKept = false
		oom := in.cg != nil && in.cg.oomKills() > oomBase
		switch {
		case r.cause == causeTimeout && r.killed:
			res.Status = cell.StatusTimeout
			res.KilledBy = cell.KilledByTimeout
			res.Error = &cell.Error{
				Name: "TimeoutError",
				Value: fmt.Sprintf("the cell ran past its time limit and did not stop within %v of the interrupt; "+
					"the interpreter was killed and restarted, so all variables and imports are lost", in.cfg.Grace),
			}
		case oom && !r.killed:
			res.Status = cell.StatusError
			res.KilledBy = cell.KilledByOOM
			res.Error = &cell.Error{
				Name: "OutOfMemory",
				Value: "the interpreter ran out of memory and was killed; it was restarted, " +
					"so all variables and imports are lost. Use less memory (smaller data, chunks, del large objects).",
			}
		case r.restarted:
			res.Status = cell.StatusLost
			res.KilledBy = cell.KilledBySignal
			res.Error = &cell.Error{Name: "InterpreterLost", Value: "the interpreter was restarted during the cell; all variables and imports are lost"}
		case r.cause == causeInterrupt && r.killed:
			res.Status = cell.StatusLost
			res.KilledBy = cell.KilledBySignal
			res.Error = &cell.Error{
				Name:  "KeyboardInterrupt",
				Value: fmt.Sprintf("the cell did not stop within %v of the interrupt; the interpreter was killed and restarted, so all variables and imports are lost", in.cfg.Grace),
			}
		case r.protoErr != nil:
			res.Status = cell.StatusLost
			res.KilledBy = cell.KilledBySignal
			res.Error = &cell.Error{Name: "InterpreterLost", Value: fmt.Sprintf("the interpreter broke the supervisor protocol (%v) and was restarted; all variables and imports are lost", r.protoErr)}
		default:
			res.Status = cell.StatusLost
			if signaled {
				res.KilledBy = cell.KilledBySignal
			}
			res.Error = &cell.Error{
				Name:  "InterpreterLost",
				Value: fmt.Sprintf("the Python interpreter %s during the cell; it will be restarted for the next cell and all variables and imports are lost", how),
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
