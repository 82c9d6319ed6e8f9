package sandboxtest

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// Placeholders for the Manager methods issue 26 adds.

func (m *Manager) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	return sandbox.ProcessExit{}, fmt.Errorf("%w: StartProcess is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) AttachProcess(ctx context.Context, id string, pid int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	return sandbox.ProcessExit{}, fmt.Errorf("%w: AttachProcess is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	return nil, fmt.Errorf("%w: ListProcesses is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	return fmt.Errorf("%w: SendInput is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	return fmt.Errorf("%w: SignalProcess is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	return fmt.Errorf("%w: ResizePTY is not built yet (issue 26)", sandbox.ErrNotSupported)
}
