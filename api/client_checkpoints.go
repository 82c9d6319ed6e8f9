package api

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoints: not built yet (issue 29).

func (c *Client) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}

func (c *Client) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	return nil, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}

func (c *Client) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}

func (c *Client) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	return sandbox.CheckpointInfo{}, fmt.Errorf("%w: checkpoints", sandbox.ErrNotSupported)
}
