package sandboxtest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Processes of the double. A process is a goroutine-free state machine
// by its argv[0]:
//
//	echo   its arguments on stdout, then exit 0
//	fail   "failed" on stderr, then exit 1
//	sleep  nothing until it is signalled or its timeout passes
//	cat    its input back on stdout (or the terminal) until end of input
//	sh, bash  with a PTY: a terminal that echoes its input; a line
//	       "exit" ends it (exit 0); a resize prints "resized COLSxROWS"
//	anything else cannot start: an end event with Exit.Error
//
// The rules are the contract's: MaxProcesses per sandbox (ErrFull), root
// only in a sandbox created with Root (ErrForbidden), input only to a
// process with Stdin or a PTY (ErrInvalid), an unknown or ended pid is
// ErrNotFound, a process outlives the stream that started it, and an
// attacher gets the backlog (at most MaxProcessBacklog bytes) first.

// fakeProcs is the double's processes of each manager: kept outside
// Manager's own fields, so the file stands alone.
var fakeProcs sync.Map // *Manager -> *procSet

type procSet struct {
	mu    sync.Mutex
	next  int
	procs map[string]map[int]*fakeProc // sandbox id -> pid -> process
}

func (m *Manager) procSet() *procSet {
	v, _ := fakeProcs.LoadOrStore(m, &procSet{next: 99, procs: map[string]map[int]*fakeProc{}})
	return v.(*procSet)
}

type fakeProc struct {
	info  sandbox.ProcessInfo
	input bool // stdin or a PTY

	mu       sync.Mutex
	events   []sandbox.ProcessEvent // output kept: the backlog
	first    int                    // the index of events[0] since the start
	size     int
	changed  chan struct{} // closed and replaced on every change
	ended    bool
	exit     sandbox.ProcessExit
	line     []byte // a shell's input line so far
	timer    *time.Timer
	onFinish func()
}

// emit records an output event; the caller holds p.mu.
func (p *fakeProc) emit(kind string, data []byte) {
	if len(data) == 0 {
		return
	}
	p.events = append(p.events, sandbox.ProcessEvent{Kind: kind, Data: append([]byte(nil), data...)})
	p.size += len(data)
	for p.size > sandbox.MaxProcessBacklog && len(p.events) > 1 {
		p.size -= len(p.events[0].Data)
		p.events = p.events[1:]
		p.first++
	}
	p.wake()
}

func (p *fakeProc) wake() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// finish ends the process; the caller holds p.mu.
func (p *fakeProc) finish(exit sandbox.ProcessExit) {
	if p.ended {
		return
	}
	p.ended, p.exit = true, exit
	if p.timer != nil {
		p.timer.Stop()
	}
	p.wake()
	go p.onFinish()
}

func (p *fakeProc) outKind() string {
	if p.info.PTY {
		return sandbox.ProcessPTY
	}
	return sandbox.ProcessStdout
}

// StartProcess starts a scripted process (see above).
func (m *Manager) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := m.enter("StartProcess", id, fmt.Sprintf("%q", req.Argv)); err != nil {
		return sandbox.ProcessExit{}, err
	}
	if err := req.Validate(); err != nil {
		return sandbox.ProcessExit{}, err
	}
	var root bool
	if err := m.withBox(id, func(b *box) error { root = b.info.Config.Root; return nil }); err != nil {
		return sandbox.ProcessExit{}, err
	}
	if req.User == sandbox.GuestUserRoot && !root {
		return sandbox.ProcessExit{}, fmt.Errorf("%w: sandbox %s was not created with root", sandbox.ErrForbidden, id)
	}
	switch req.Argv[0] {
	case "echo", "fail", "sleep", "cat", "sh", "bash":
	default:
		exit := sandbox.ProcessExit{ExitCode: -1, Error: fmt.Sprintf("start %s: no such file or directory", req.Argv[0])}
		if onEvent != nil {
			if err := onEvent(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &exit}); err != nil {
				return exit, err
			}
		}
		return exit, nil
	}
	ps := m.procSet()
	ps.mu.Lock()
	if len(ps.procs[id]) >= sandbox.MaxProcesses {
		ps.mu.Unlock()
		return sandbox.ProcessExit{}, fmt.Errorf("%w: sandbox %s runs %d processes", sandbox.ErrFull, id, sandbox.MaxProcesses)
	}
	ps.next++
	user := req.User
	if user == "" {
		user = sandbox.GuestUserCell
	}
	p := &fakeProc{changed: make(chan struct{}), input: req.Stdin || req.PTY != nil,
		info: sandbox.ProcessInfo{PID: ps.next, Argv: req.Argv, Cwd: req.Cwd, Tag: req.Tag, User: user, PTY: req.PTY != nil, StartedAt: epoch}}
	for k := range req.Env {
		p.info.EnvNames = append(p.info.EnvNames, k)
	}
	sort.Strings(p.info.EnvNames)
	if ps.procs[id] == nil {
		ps.procs[id] = map[int]*fakeProc{}
	}
	ps.procs[id][p.info.PID] = p
	pid := p.info.PID
	p.onFinish = func() {
		ps.mu.Lock()
		delete(ps.procs[id], pid)
		ps.mu.Unlock()
	}
	ps.mu.Unlock()

	p.mu.Lock()
	switch req.Argv[0] {
	case "echo":
		p.emit(p.outKind(), []byte(strings.Join(req.Argv[1:], " ")+"\n"))
		p.finish(sandbox.ProcessExit{})
	case "fail":
		p.emit(sandbox.ProcessStderr, []byte("failed\n"))
		p.finish(sandbox.ProcessExit{ExitCode: 1})
	case "sh", "bash":
		if req.PTY != nil {
			p.emit(sandbox.ProcessPTY, []byte("$ "))
		}
	}
	if req.Timeout > 0 && !p.ended {
		p.timer = time.AfterFunc(req.Timeout, func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.finish(sandbox.ProcessExit{ExitCode: -1, Signal: sandbox.SignalKill, TimedOut: true})
		})
	}
	p.mu.Unlock()
	if onEvent != nil {
		if err := onEvent(sandbox.ProcessEvent{Kind: sandbox.ProcessStart, PID: pid}); err != nil {
			return sandbox.ProcessExit{}, err
		}
	}
	return p.watch(ctx, 0, onEvent)
}

// watch streams p's events from index from (since its start; the backlog
// when that is gone), then its end.
func (p *fakeProc) watch(ctx context.Context, from int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	for {
		p.mu.Lock()
		from = max(from, p.first)
		evs := append([]sandbox.ProcessEvent(nil), p.events[from-p.first:]...)
		from += len(evs)
		ended, exit, changed := p.ended, p.exit, p.changed
		p.mu.Unlock()
		for _, e := range evs {
			if onEvent != nil {
				if err := onEvent(e); err != nil {
					return sandbox.ProcessExit{}, err
				}
			}
		}
		if ended {
			if onEvent != nil {
				if err := onEvent(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &exit}); err != nil {
					return exit, err
				}
			}
			return exit, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return sandbox.ProcessExit{}, ctx.Err()
		}
	}
}

// proc finds a running process of a usable sandbox.
func (m *Manager) proc(id string, pid int) (*fakeProc, error) {
	if err := m.withBox(id, func(*box) error { return nil }); err != nil {
		return nil, err
	}
	ps := m.procSet()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.procs[id][pid]
	if p == nil {
		return nil, fmt.Errorf("%w: no running process %d in sandbox %s", sandbox.ErrNotFound, pid, id)
	}
	return p, nil
}

// AttachProcess streams a running process from its backlog on.
func (m *Manager) AttachProcess(ctx context.Context, id string, pid int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := m.enter("AttachProcess", id, fmt.Sprint(pid)); err != nil {
		return sandbox.ProcessExit{}, err
	}
	p, err := m.proc(id, pid)
	if err != nil {
		return sandbox.ProcessExit{}, err
	}
	return p.watch(ctx, 0, onEvent)
}

// ListProcesses lists the running processes, by pid.
func (m *Manager) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	if err := m.enter("ListProcesses", id); err != nil {
		return nil, err
	}
	if err := m.withBox(id, func(*box) error { return nil }); err != nil {
		return nil, err
	}
	ps := m.procSet()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := []sandbox.ProcessInfo{}
	for _, p := range ps.procs[id] {
		out = append(out, p.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// SendInput feeds cat and the shells.
func (m *Manager) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	if err := m.enter("SendInput", id, fmt.Sprint(pid), fmt.Sprintf("%q", data), fmt.Sprint(eof)); err != nil {
		return err
	}
	if len(data) > sandbox.MaxProcessInput {
		return fmt.Errorf("%w: input is %d bytes, at most %d", sandbox.ErrTooLarge, len(data), sandbox.MaxProcessInput)
	}
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	if !p.input {
		return fmt.Errorf("%w: process %d was started without stdin or a terminal", sandbox.ErrInvalid, pid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.info.Argv[0] {
	case "cat":
		p.emit(p.outKind(), data)
	case "sh", "bash":
		p.emit(p.outKind(), data) // the terminal's echo
		for _, c := range data {
			if c != '\n' && c != '\r' {
				p.line = append(p.line, c)
				continue
			}
			if strings.TrimSpace(string(p.line)) == "exit" {
				p.finish(sandbox.ProcessExit{})
				return nil
			}
			p.line = p.line[:0]
			p.emit(sandbox.ProcessPTY, []byte("\r\n$ "))
		}
	}
	if eof {
		p.finish(sandbox.ProcessExit{})
	}
	return nil
}

// SignalProcess ends the process, as the signal's default action does.
func (m *Manager) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	if err := m.enter("SignalProcess", id, fmt.Sprint(pid), sig); err != nil {
		return err
	}
	if !sandbox.ValidSignal(sig) {
		return fmt.Errorf("%w: signal %q", sandbox.ErrInvalid, sig)
	}
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finish(sandbox.ProcessExit{ExitCode: -1, Signal: sig})
	return nil
}

// ResizePTY prints the new size on the terminal.
func (m *Manager) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	if err := m.enter("ResizePTY", id, fmt.Sprint(pid), fmt.Sprintf("%dx%d", size.Cols, size.Rows)); err != nil {
		return err
	}
	if err := size.Validate(); err != nil {
		return err
	}
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	if !p.info.PTY {
		return fmt.Errorf("%w: process %d has no terminal", sandbox.ErrInvalid, pid)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.emit(sandbox.ProcessPTY, []byte(fmt.Sprintf("resized %dx%d\r\n", size.Cols, size.Rows)))
	return nil
}
