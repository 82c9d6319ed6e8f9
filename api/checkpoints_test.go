package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// ckFake is the fake with a checkpoint record of its own: n counts up,
// restore n drops those after, "busy" is a sandbox with a cell running,
// and exec results name a checkpoint.
type ckFake struct {
	*sandboxtest.Manager
	mu  sync.Mutex
	cps map[string][]sandbox.CheckpointInfo
}

func (m *ckFake) Checkpoint(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.cps[id]
	in := sandbox.CheckpointInfo{N: len(l) + 1, Kind: sandbox.CheckpointManual, Depth: len(l) + 1}
	m.cps[id] = append(l, in)
	return in, nil
}

func (m *ckFake) Checkpoints(ctx context.Context, id string) ([]sandbox.CheckpointInfo, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cps[id], nil
}

func (m *ckFake) RestoreCheckpoint(ctx context.Context, id string, n int) (sandbox.CheckpointInfo, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return sandbox.CheckpointInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.cps[id]
	if n < 1 || n > len(l) {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: no checkpoint %d", sandbox.ErrNotFound, n)
	}
	m.cps[id] = l[:n]
	return l[n-1], nil
}

func (m *ckFake) Undo(ctx context.Context, id string) (sandbox.CheckpointInfo, error) {
	m.mu.Lock()
	k := len(m.cps[id])
	m.mu.Unlock()
	if k < 2 {
		return sandbox.CheckpointInfo{}, fmt.Errorf("%w: an undo needs two checkpoints", sandbox.ErrNotFound)
	}
	return m.RestoreCheckpoint(ctx, id, k-1)
}

func (m *ckFake) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (cell.ExecResult, error) {
	r, err := m.Manager.Exec(ctx, id, req)
	r.Checkpoint, r.CheckpointError = 7, "<&> no space"
	return r, err
}

// TestCheckpointRoutes: each checkpoint route reaches the manager through
// the Go client, answers its status, and maps not found to 404 and a bad
// number to 400.
func TestCheckpointRoutes(t *testing.T) {
	fake := &ckFake{cps: map[string][]sandbox.CheckpointInfo{}}
	env := newTestEnvWith(t, func(m *sandboxtest.Manager) sandbox.Manager { fake.Manager = m; return fake }, nil)
	ctx := context.Background()
	c := env.client
	info, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 3; want++ {
		cp, err := c.Checkpoint(ctx, info.ID)
		if err != nil || cp.N != want {
			t.Fatalf("checkpoint %d: %+v, %v", want, cp, err)
		}
	}
	l, err := c.Checkpoints(ctx, info.ID)
	if err != nil || len(l) != 3 || l[2].N != 3 {
		t.Fatalf("list: %+v, %v", l, err)
	}
	if cp, err := c.Undo(ctx, info.ID); err != nil || cp.N != 2 {
		t.Fatalf("undo: %+v, %v", cp, err)
	}
	if cp, err := c.RestoreCheckpoint(ctx, info.ID, 1); err != nil || cp.N != 1 {
		t.Fatalf("restore 1: %+v, %v", cp, err)
	}
	if _, err := c.RestoreCheckpoint(ctx, info.ID, 9); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("restore 9: %v, want not found", err)
	}
	if _, err := c.Undo(ctx, info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("undo with one kept: %v, want not found", err)
	}
	if _, err := c.Checkpoints(ctx, "sb-000000000000"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("list of no sandbox: %v, want not found", err)
	}
	for _, n := range []string{"0", "-1", "x", "99999999999999999999"} {
		resp, err := env.raw.Post("http://cellvm/v1/sandboxes/"+info.ID+"/checkpoints/"+n+"/restore", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("restore %q: %d, want 400", n, resp.StatusCode)
		}
	}
	r, err := c.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{"echo", "hi"}})
	if err != nil || r.Checkpoint != 7 || r.CheckpointError != "<&> no space" {
		t.Errorf("exec result over the wire: %+v, %v", r, err)
	}
}
