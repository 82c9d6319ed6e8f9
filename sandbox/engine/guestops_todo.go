package engine

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Placeholders for the Manager methods issue 26 adds; each helper replaces
// its own with the real one (processes.go, fileops.go, ports.go, ttl.go).

func (m *VMManager) SetTTL(ctx context.Context, id string, ttl time.Duration) (sandbox.Info, error) {
	return sandbox.Info{}, fmt.Errorf("%w: SetTTL is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) ListDir(ctx context.Context, id string, req sandbox.FileRequest) ([]sandbox.FileEntry, error) {
	return nil, fmt.Errorf("%w: ListDir is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) StatPath(ctx context.Context, id string, req sandbox.FileRequest) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, fmt.Errorf("%w: StatPath is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) MakeDir(ctx context.Context, id string, req sandbox.FileRequest) (bool, error) {
	return false, fmt.Errorf("%w: MakeDir is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) MovePath(ctx context.Context, id string, from sandbox.FileRequest, to string) (sandbox.FileEntry, error) {
	return sandbox.FileEntry{}, fmt.Errorf("%w: MovePath is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) RemovePath(ctx context.Context, id string, req sandbox.FileRequest) error {
	return fmt.Errorf("%w: RemovePath is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) WatchDir(ctx context.Context, id string, req sandbox.FileRequest, onEvent func(sandbox.FileEvent) error) error {
	return fmt.Errorf("%w: WatchDir is not built yet (issue 26)", sandbox.ErrNotSupported)
}

func (m *VMManager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	return nil, fmt.Errorf("%w: DialPort is not built yet (issue 26)", sandbox.ErrNotSupported)
}
