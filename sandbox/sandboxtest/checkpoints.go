package sandboxtest

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoints: not built yet (issue 29).

func (m *Manager) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}

func (m *Manager) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	return nil, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}

func (m *Manager) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}

func (m *Manager) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}
