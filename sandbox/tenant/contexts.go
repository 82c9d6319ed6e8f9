package tenant

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// Contexts implements sandbox.Manager.
func (m *Manager) Contexts(ctx context.Context, id string) ([]sandbox.ContextInfo, error) {
	return nil, fmt.Errorf("%w: contexts (issue 27, not yet)", sandbox.ErrNotSupported)
}

// CreateContext implements sandbox.Manager.
func (m *Manager) CreateContext(ctx context.Context, id string, spec sandbox.ContextSpec) (sandbox.ContextInfo, error) {
	return sandbox.ContextInfo{}, fmt.Errorf("%w: contexts (issue 27, not yet)", sandbox.ErrNotSupported)
}

// DeleteContext implements sandbox.Manager.
func (m *Manager) DeleteContext(ctx context.Context, id string, s sandbox.Session) error {
	return fmt.Errorf("%w: contexts (issue 27, not yet)", sandbox.ErrNotSupported)
}
