package engine

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
	"github.com/cellvm/cellvm/sandbox"
)

// Background processes: the Manager's process methods over the agent's
// (proto.OpProc). A stream holds the sandbox running (no pause or
// snapshot starts under it) only until its process runs (the agent's
// start event): a background server watched for hours must not keep its
// sandbox from pausing. A pause then ends the stream (ErrBusy, saying
// so); the process is saved with the VM and runs on after the resume,
// where AttachProcess finds it. The process itself goes on when a stream
// ends. Whether root may
// be asked for is the host's decision (Config.Root), never the guest's.

// StartProcess implements sandbox.Manager.
func (m *VMManager) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := req.Validate(); err != nil {
		return sandbox.ProcessExit{}, err
	}
	if req.Cwd != "" && !path.IsAbs(req.Cwd) {
		return sandbox.ProcessExit{}, fmt.Errorf("%w: cwd %q is not an absolute path", sandbox.ErrInvalid, req.Cwd)
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return sandbox.ProcessExit{}, err
	}
	defer release()
	root := req.User == sandbox.GuestUserRoot
	if root && !s.cfg.Root {
		return sandbox.ProcessExit{}, fmt.Errorf("%w: sandbox %s was not created with root, so its processes cannot run as root", sandbox.ErrForbidden, id)
	}
	pr := proto.ProcRequest{Argv: req.Argv, Env: req.Env, Root: root, Stdin: req.Stdin, Tag: req.Tag, TimeoutMS: req.Timeout.Milliseconds()}
	if req.Cwd != "" {
		pr.Cwd = path.Clean(req.Cwd)
	}
	if req.PTY != nil {
		pr.PTY = &proto.PTYSize{Cols: req.PTY.Cols, Rows: req.PTY.Rows}
	}
	exit, err := s.agent.StartProc(ctx, pr, releaseOnStart(release, processEvents(onEvent)))
	return m.processEnd(s, exit, err, onEvent)
}

// AttachProcess implements sandbox.Manager.
func (m *VMManager) AttachProcess(ctx context.Context, id string, pid int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := validPID(pid); err != nil {
		return sandbox.ProcessExit{}, err
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return sandbox.ProcessExit{}, err
	}
	defer release()
	exit, err := s.agent.AttachProc(ctx, pid, releaseOnStart(release, processEvents(onEvent)))
	return m.processEnd(s, exit, err, onEvent)
}

// releaseOnStart lets go of the stream's hold on the sandbox at its first
// event (the agent's start): from then on a pause may begin.
func releaseOnStart(release func(), f func(proto.ProcEvent) error) func(proto.ProcEvent) error {
	return func(e proto.ProcEvent) error {
		release()
		return f(e)
	}
}

// processEvents turns the agent's events into the Manager's.
func processEvents(onEvent func(sandbox.ProcessEvent) error) func(proto.ProcEvent) error {
	return func(e proto.ProcEvent) error {
		if onEvent == nil {
			return nil
		}
		return onEvent(sandbox.ProcessEvent{Kind: e.Kind, PID: e.PID, Data: e.Data})
	}
}

// processEnd maps a stream's end: its exit (passed on as the end event)
// or its error.
func (m *VMManager) processEnd(s *vmSandbox, pe proto.ProcExit, err error, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err != nil {
		switch s.lc.phase() {
		case phasePausing, phasePaused, phaseResuming:
			return sandbox.ProcessExit{}, fmt.Errorf("%w: sandbox %s was paused while this stream watched its process; the process runs on after the resume (attach to it again)", sandbox.ErrBusy, s.id)
		}
		return sandbox.ProcessExit{}, m.procErr(s, err)
	}
	exit := sandbox.ProcessExit{ExitCode: pe.ExitCode, Signal: pe.Signal, TimedOut: pe.TimedOut, Error: pe.Error}
	if onEvent != nil {
		if err := onEvent(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &exit}); err != nil {
			return exit, err
		}
	}
	return exit, nil
}

// procErr maps the agent's process errors; the rest are agentErr's.
func (m *VMManager) procErr(s *vmSandbox, err error) error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case proto.CodeFull:
			return fmt.Errorf("%w: sandbox %s runs %d processes, the most it may", sandbox.ErrFull, s.id, sandbox.MaxProcesses)
		case proto.CodeProcInvalid:
			return fmt.Errorf("%w: %s", sandbox.ErrInvalid, pe.Message)
		case proto.CodeNotFound:
			return fmt.Errorf("%w: no running process with that pid in sandbox %s", sandbox.ErrNotFound, s.id)
		}
	}
	return m.agentErr(s, err)
}

func validPID(pid int) error {
	if pid < 1 || pid > 1<<22 {
		return fmt.Errorf("%w: pid %d out of range", sandbox.ErrInvalid, pid)
	}
	return nil
}

// ListProcesses implements sandbox.Manager.
func (m *VMManager) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	s, release, err := m.readyHeld(id)
	if err != nil {
		return nil, err
	}
	defer release()
	list, err := s.agent.ListProcs(ctx)
	if err != nil {
		return nil, m.procErr(s, err)
	}
	out := make([]sandbox.ProcessInfo, 0, len(list))
	for _, p := range list {
		user := sandbox.GuestUserCell
		if p.Root {
			user = sandbox.GuestUserRoot
		}
		out = append(out, sandbox.ProcessInfo{PID: p.PID, Argv: p.Argv, Cwd: p.Cwd, Tag: p.Tag, User: user, PTY: p.PTY,
			EnvNames: p.EnvNames, StartedAt: time.UnixMilli(p.StartedUnixMS)})
	}
	return out, nil
}

// SendInput implements sandbox.Manager.
func (m *VMManager) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	if err := validPID(pid); err != nil {
		return err
	}
	if len(data) > sandbox.MaxProcessInput {
		return fmt.Errorf("%w: input is %d bytes, at most %d", sandbox.ErrTooLarge, len(data), sandbox.MaxProcessInput)
	}
	return m.procCall(id, func(s *vmSandbox) error { return s.agent.ProcInput(ctx, pid, data, eof) })
}

// SignalProcess implements sandbox.Manager.
func (m *VMManager) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	if err := validPID(pid); err != nil {
		return err
	}
	if !sandbox.ValidSignal(sig) {
		return fmt.Errorf("%w: signal %q: use SIGTERM, SIGKILL, SIGINT or SIGHUP", sandbox.ErrInvalid, clip(sig, 32))
	}
	return m.procCall(id, func(s *vmSandbox) error { return s.agent.SignalProc(ctx, pid, sig) })
}

// ResizePTY implements sandbox.Manager.
func (m *VMManager) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	if err := validPID(pid); err != nil {
		return err
	}
	if err := size.Validate(); err != nil {
		return err
	}
	return m.procCall(id, func(s *vmSandbox) error {
		return s.agent.ResizeProc(ctx, pid, proto.PTYSize{Cols: size.Cols, Rows: size.Rows})
	})
}

func (m *VMManager) procCall(id string, call func(*vmSandbox) error) error {
	s, release, err := m.readyHeld(id)
	if err != nil {
		return err
	}
	defer release()
	if err := call(s); err != nil {
		return m.procErr(s, err)
	}
	return nil
}
