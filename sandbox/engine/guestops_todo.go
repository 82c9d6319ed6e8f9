package engine

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// Placeholders for the Manager methods issue 26 adds; each helper replaces
// its own with the real one (processes.go, fileops.go, ports.go, ttl.go).

func (m *VMManager) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	return sandbox.ProcessExit{}, fmt.Errorf("%w: StartProcess is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) AttachProcess(ctx context.Context, id string, pid int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	return sandbox.ProcessExit{}, fmt.Errorf("%w: AttachProcess is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	return nil, fmt.Errorf("%w: ListProcesses is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	return fmt.Errorf("%w: SendInput is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	return fmt.Errorf("%w: SignalProcess is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	return fmt.Errorf("%w: ResizePTY is not built yet (issue 26)", sandbox.ErrNotSupported)
}
