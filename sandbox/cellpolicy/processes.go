package cellpolicy

import (
	"context"

	"github.com/cellvm/cellvm/sandbox"
)

// StartProcess asks the hook about a process as about an exec (kind
// "exec", its argv): a process is a command that outlives its request,
// and a policy written for commands must not be passed by starting one
// in the background. A refused process never starts: its end event and
// exit say PolicyRefused (exit code ExecExitCode), as a refused exec's
// result does. What is typed into a process's stdin or terminal later is
// not asked about: a policy that must see every command refuses
// interactive shells by their argv.
func (m *Manager) StartProcess(ctx context.Context, id string, r sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := r.Validate(); err != nil {
		return sandbox.ProcessExit{}, err
	}
	if skip, err := m.unknown(ctx, id); err != nil || skip {
		if err != nil {
			return sandbox.ProcessExit{}, err
		}
		return m.Manager.StartProcess(ctx, id, r, onEvent)
	}
	v, err := m.ask(ctx, id, Request{Kind: KindExec, Argv: r.Argv})
	if err != nil {
		return sandbox.ProcessExit{}, err
	}
	if v.allow {
		return m.Manager.StartProcess(ctx, id, r, onEvent)
	}
	exit := sandbox.ProcessExit{ExitCode: ExecExitCode, Error: ErrorName + ": " + v.reason}
	if onEvent != nil {
		if err := onEvent(sandbox.ProcessEvent{Kind: sandbox.ProcessEnd, Exit: &exit}); err != nil {
			return exit, err
		}
	}
	return exit, nil
}
