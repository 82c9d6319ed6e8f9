package engine

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/cellvm/cellvm/agentclient"
)

// DefaultResultMemoryBytes is the daemon's default budget for cell results
// held at once, across every sandbox.
const DefaultResultMemoryBytes = 1 << 30

// resultHeapMargin is what the Go runtime's soft memory limit allows past
// the result budget: the rest of the daemon (its sandboxes' records,
// connections, small messages) and the garbage a result leaves behind
// while it is collected.
const resultHeapMargin = 512 << 20

// SetResultMemory sets the budget for the cell results the daemon holds at
// once, across every sandbox of every manager in the process (it is
// agentclient's default budget: memory is the process's), and returns it.
//
// A guest may answer a cell with up to ~80 MiB of JSON and every sandbox
// may do so at once, in a loop: the budget is charged before a large
// result is read, so a result past what is left waits for room and then
// is refused with a DaemonBusy error result (the sandbox kept), never
// buffered (see agentclient.Budget).
//
// The charge counts what a result holds (its bytes and its decoded copy);
// the garbage it leaves is the collector's. So that the process's memory
// follows the budget rather than twice the live heap (GOGC's default), the
// runtime's soft memory limit is set to the budget plus resultHeapMargin,
// unless the operator set GOMEMLIMIT. bytes <= 0 means
// DefaultResultMemoryBytes; less than agentclient.MinBudget (one maximal
// result) is raised to it.
func SetResultMemory(bytes int64, log *slog.Logger) *agentclient.Budget {
	if bytes <= 0 {
		bytes = DefaultResultMemoryBytes
	}
	b := agentclient.NewBudget(bytes)
	agentclient.SetDefaultBudget(b)
	limit := "GOMEMLIMIT"
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(b.Limit() + resultHeapMargin)
		limit = "budget+512MiB"
	}
	if log != nil {
		log.Info("result memory budget", "mib", b.Limit()>>20, "soft_limit", limit)
	}
	return b
}
