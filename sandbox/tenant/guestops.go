package tenant

import (
	"context"
	"net"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// The sandbox calls of issue 26 (processes, files, ports, TTL): each
// checks that the caller's tenant owns the sandbox (another tenant's is
// ErrNotFound, as a missing one) and passes the call on.

func (m *Manager) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.Info{}, err
	}
	return m.inner.SetTTL(ctx, id, ttl)
}

func (m *Manager) StartProcess(ctx context.Context, id string, req sandbox.ProcessRequest, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.ProcessExit{}, err
	}
	return m.inner.StartProcess(ctx, id, req, onEvent)
}

func (m *Manager) AttachProcess(ctx context.Context, id string, pid int, onEvent func(sandbox.ProcessEvent) error) (sandbox.ProcessExit, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.ProcessExit{}, err
	}
	return m.inner.AttachProcess(ctx, id, pid, onEvent)
}

func (m *Manager) ListProcesses(ctx context.Context, id string) ([]sandbox.ProcessInfo, error) {
	if err := m.check(ctx, id); err != nil {
		return nil, err
	}
	return m.inner.ListProcesses(ctx, id)
}

func (m *Manager) SendInput(ctx context.Context, id string, pid int, data []byte, eof bool) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.SendInput(ctx, id, pid, data, eof)
}

func (m *Manager) SignalProcess(ctx context.Context, id string, pid int, sig string) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.SignalProcess(ctx, id, pid, sig)
}

func (m *Manager) ResizePTY(ctx context.Context, id string, pid int, size sandbox.PTYSize) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.ResizePTY(ctx, id, pid, size)
}

func (m *Manager) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	if err := m.check(ctx, id); err != nil {
		return nil, err
	}
	return m.inner.ListDir(ctx, id, req)
}

func (m *Manager) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.FileEntry{}, err
	}
	return m.inner.StatPath(ctx, id, req)
}

func (m *Manager) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	if err := m.check(ctx, id); err != nil {
		return false, err
	}
	return m.inner.MakeDir(ctx, id, req)
}

func (m *Manager) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.FileEntry{}, err
	}
	return m.inner.MovePath(ctx, id, from, to)
}

func (m *Manager) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.RemovePath(ctx, id, req)
}

func (m *Manager) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, onEvent func(sandbox.FileEvent) error) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.WatchDir(ctx, id, req, onEvent)
}

func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := m.check(ctx, id); err != nil {
		return nil, err
	}
	return m.inner.DialPort(ctx, id, port)
}
