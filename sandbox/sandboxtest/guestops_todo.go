package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Placeholders for the Manager methods issue 26 adds.

func (m *Manager) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	return sandbox.Info{}, fmt.Errorf("%w: SetTTL is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	return nil, fmt.Errorf("%w: ListDir is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, fmt.Errorf("%w: StatPath is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	return false, fmt.Errorf("%w: MakeDir is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, fmt.Errorf("%w: MovePath is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	return fmt.Errorf("%w: RemovePath is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, onEvent func(sandbox.FileEvent) error) error {
	return fmt.Errorf("%w: WatchDir is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, fmt.Errorf("%w: DialPort is not built yet (issue 26)", sandbox.ErrNotSupported)
}
