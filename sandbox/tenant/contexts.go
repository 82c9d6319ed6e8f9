package tenant

import (
	"context"

	"github.com/cellvm/cellvm/sandbox"
)

// A sandbox's sessions are its owner's as the sandbox is: another
// tenant's sandbox is not found, exactly like a missing one.

// Contexts implements sandbox.Manager.
func (m *Manager) Contexts(ctx context.Context, id string) ([]sandbox.ContextInfo, error) {
	if err := m.check(ctx, id); err != nil {
		return nil, err
	}
	return m.inner.Contexts(ctx, id)
}

// CreateContext implements sandbox.Manager.
func (m *Manager) CreateContext(ctx context.Context, id string, spec sandbox.ContextSpec) (sandbox.ContextInfo, error) {
	if err := m.check(ctx, id); err != nil {
		return sandbox.ContextInfo{}, err
	}
	return m.inner.CreateContext(ctx, id, spec)
}

// DeleteContext implements sandbox.Manager.
func (m *Manager) DeleteContext(ctx context.Context, id string, s sandbox.Session) error {
	if err := m.check(ctx, id); err != nil {
		return err
	}
	return m.inner.DeleteContext(ctx, id, s)
}
