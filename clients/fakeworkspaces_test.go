package clients

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/sandbox"
)

// The clients' fake has no workspaces yet: none are listed, and deleting
// one finds none.

func (m *fakeManager) Workspaces(ctx context.Context) ([]sandbox.WorkspaceInfo, error) {
	return []sandbox.WorkspaceInfo{}, nil
}

func (m *fakeManager) DeleteWorkspace(ctx context.Context, name string) error {
	return fmt.Errorf("%w: no workspace %s", sandbox.ErrNotFound, name)
}
