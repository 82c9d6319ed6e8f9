package tenant

import (
	"context"

	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoints are the sandbox's own: each call acts only on a sandbox the
// caller's tenant owns, and any other reads as missing (own).

func (m *Manager) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	c, info, err := m.own(ctx, id)
	if err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	if !all(c) {
		if err := m.diskRoom(ctx, info.Tenant, "checkpoint"); err != nil {
			return sandbox.CheckpointInfo{}, err
		}
	}
	return m.inner.Checkpoint(ctx, id)
}

func (m *Manager) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	if err := m.check(ctx, id); err != nil {
		return nil, err
	}
	return m.inner.Checkpoints(ctx, id)
}

func (m *Manager) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	return m.inner.RestoreCheckpoint(ctx, id, n)
}

func (m *Manager) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	return m.inner.Undo(ctx, id)
}
