package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// bigCell returns a ~19 MiB PNG (base64) as its main result. Each large
// message is charged the most a message may cost (agentclient.Budget:
// twice proto.MaxAgentMessage, 160 MiB), whatever its size, so a 320 MiB
// budget lets two in at once and the rest wait or are refused, as with
// maximal ones; a 320 MiB guest builds this one twice in a row without
// running out of memory (a 29 MiB one left the second round OOM).
const bigCell = `class P:
    def _repr_png_(self):
        return b'\x89PNG' + bytes(14 << 20)
P()`

// rssMiB reads a process's resident memory.
func rssMiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb >> 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestResultBudgetUnderLoad: 8 sandboxes return large results in a
// loop under a 320 MiB result budget. Every cell gets a result (whole, or
// a DaemonBusy error result with its sandbox kept), and the daemon's RSS
// stays under its budget plus its baseline (and the runtime's margin).
func TestResultBudgetUnderLoad(t *testing.T) {
	kvmtest.Require(t)
	const n, rounds, budgetMiB = 8, 2, 320
	d := startDaemon(t, t.TempDir(), "--network=false", fmt.Sprintf("--result-memory-mib=%d", budgetMiB))
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		// 320 MiB each: the rig's L1 (4 GiB) takes eight under the
		// daemon's cap (3/4 of the host), and a guest builds its 19 MiB
		// of base64 in that.
		info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 320})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		ids[i] = info.ID
		defer c.Delete(ctx, info.ID)
	}
	base := rssMiB(t, d.cmd.Process.Pid)
	var peak int64
	var mu sync.Mutex
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			r := rssMiB(t, d.cmd.Process.Pid)
			mu.Lock()
			peak = max(peak, r)
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	var whole, busy sync.Map
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range rounds {
				// The rig's L1 has few CPUs for eight guests that each
				// build and encode a 29 MiB display: the timeout is the
				// guests' CPU, not the budget, which this does not test.
				start := time.Now()
				r, err := c.RunCell(ctx, id, sandbox.Cell{Code: bigCell, Timeout: 10 * time.Minute}, nil)
				t.Logf("%s round %d: %v after %v", id, k, r.Status, time.Since(start).Round(time.Millisecond))
				switch {
				case err != nil:
					t.Errorf("%s round %d: no result: %v", id, k, err)
					return
				case r.Status == cell.StatusOK && len(r.Results) == 1 && len(r.Results[0].Data["image/png"]) > 18<<20:
					whole.Store(fmt.Sprint(id, k), true)
				case r.Status == cell.StatusError && r.Error != nil && r.Error.Name == "DaemonBusy" && r.StateKept:
					busy.Store(fmt.Sprint(id, k), true)
				default:
					t.Errorf("%s round %d: neither the result nor a DaemonBusy one: status %s, error %+v", id, k, r.Status, r.Error)
					return
				}
			}
			// The sandbox is kept and answers.
			if r, err := c.RunCell(ctx, id, sandbox.Cell{Code: "1+1", Timeout: time.Minute}, nil); err != nil || text(r) != "2" {
				t.Errorf("%s after the loop: %v %+v", id, err, r)
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	count := func(m *sync.Map) (k int) {
		m.Range(func(any, any) bool { k++; return true })
		return k
	}
	// The runtime's soft limit is the budget plus 512 MiB (engine.SetResultMemory).
	limit := base + budgetMiB + 512
	t.Logf("%d whole results, %d DaemonBusy; daemon RSS baseline %d MiB, peak %d MiB, limit %d MiB", count(&whole), count(&busy), base, peak, limit)
	if peak > limit {
		t.Errorf("daemon RSS peaked at %d MiB, past its budget %d MiB + baseline %d MiB + margin 512 MiB", peak, budgetMiB, base)
	}
	if count(&whole) == 0 {
		t.Error("no cell got its whole result")
	}
}
