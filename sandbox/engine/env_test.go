package engine

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// envInterp is the fake VM's interpreter with an environment: setenv
// stores the variables, and the cell "env" answers with them as JSON.
type envInterp struct {
	diesInterp
	mu  sync.Mutex
	env map[string]string
	// restored: the fake VM started from a snapshot (the cell "started"
	// says "restored" or "booted").
	restored bool
}

func (e *envInterp) SetEnv(env map[string]string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.env = env
	return nil
}

func (e *envInterp) Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	switch code {
	case "env":
	case "started":
		if e.restored {
			return cell.Result{Status: cell.StatusOK, Stdout: "restored"}, nil
		}
		return cell.Result{Status: cell.StatusOK, Stdout: "booted"}, nil
	case templateWarmCode, templateWarmAnyCode:
		return fakeWarm(ctx)
	default:
		return e.diesInterp.Run(ctx, code, timeout, onEvent)
	}
	e.mu.Lock()
	b, _ := json.Marshal(e.env)
	e.mu.Unlock()
	return cell.Result{Status: cell.StatusOK, Stdout: string(b)}, nil
}

// TestCreateDeliversEnvToTheGuest: the env of a create request reaches the
// guest's agent before the sandbox is handed out, and a sandbox created
// without env sends none.
func TestCreateDeliversEnvToTheGuest(t *testing.T) {
	t.Setenv("CELLVM_TEST_FAKE_VMM", "agent")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newFakeManager(t, exe, 30*time.Second)
	ctx := context.Background()
	want := map[string]string{"API_TOKEN": "s3cret", "GREETING": "hello world"}
	info, err := m.Create(ctx, sandbox.Config{Env: want})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, info.ID)
	r, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "env", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil || len(got) != len(want) || got["API_TOKEN"] != "s3cret" || got["GREETING"] != "hello world" {
		t.Errorf("the guest's env is %s (%v), want %v", r.Stdout, err, want)
	}

	plain, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, plain.ID)
	if r, _ := m.RunCell(ctx, plain.ID, sandbox.Cell{Code: "env", Timeout: time.Minute}, nil); r.Stdout != "null" {
		t.Errorf("a sandbox without env got %s from its create", r.Stdout)
	}
}
