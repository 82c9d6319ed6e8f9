package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoint records a checkpoint of the sandbox now (POST
// /v1/sandboxes/{id}/checkpoints).
func (c *Client) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	var info sandbox.CheckpointInfo
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "checkpoints"), nil, &info, http.StatusCreated)
	return info, err
}

// Checkpoints lists the sandbox's kept checkpoints, oldest first.
func (c *Client) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	var l CheckpointList
	err := c.do(ctx, http.MethodGet, c.sandboxURL(id, "checkpoints"), nil, &l, http.StatusOK)
	return l.Checkpoints, err
}

// RestoreCheckpoint brings the sandbox back to checkpoint n (POST
// /v1/sandboxes/{id}/checkpoints/{n}/restore).
func (c *Client) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	var info sandbox.CheckpointInfo
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "checkpoints", strconv.Itoa(n), "restore"), nil, &info, http.StatusOK)
	return info, err
}

// Undo restores the checkpoint before the last (POST
// /v1/sandboxes/{id}/checkpoints/undo).
func (c *Client) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	var info sandbox.CheckpointInfo
	err := c.do(ctx, http.MethodPost, c.sandboxURL(id, "checkpoints", "undo"), nil, &info, http.StatusOK)
	return info, err
}
