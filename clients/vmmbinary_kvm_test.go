package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// TestRigDaemonRunsCellvmVMM (issue 28's VMM overhead): the real daemon
// (build/bin/cellvm serve) starts each VM as build/bin/cellvm-vmm, the
// VMM's own small binary built with it, and the VM answers a cell. Its
// resident memory outside the guest's is logged for the record; the bench
// measures it (make bench BENCH_ARGS="-only jail").
func TestRigDaemonRunsCellvmVMM(t *testing.T) {
	sock, state := realDaemonState(t)
	c := api.NewClient(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Delete(context.Background(), info.ID)
	r, err := c.RunCell(ctx, info.ID, sandbox.Cell{Code: "1 + 1"}, nil)
	if err != nil || r.MainResult() == nil {
		t.Fatalf("cell: %+v, %v", r, err)
	}
	b, err := os.ReadFile(filepath.Join(state, "sandboxes", info.ID, "vmm-proc.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal(b, &rec); err != nil || rec.PID <= 0 {
		t.Fatalf("vmm-proc.json %q: %v", b, err)
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", rec.PID))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(exe) != "cellvm-vmm" {
		t.Errorf("the daemon's VMM runs %s, want build/bin/cellvm-vmm", exe)
	}
	rollup, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", rec.PID))
	t.Logf("VMM %d runs %s; smaps_rollup:\n%s", rec.PID, exe, rollup)
}
