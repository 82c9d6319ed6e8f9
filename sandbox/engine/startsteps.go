package engine

import (
	"fmt"
	"log/slog"
	"time"
)

// startSteps is where a sandbox's start went, after its admission
// (queued_ms is the wait before it), in the order they run:
//
//   - Prepare: the daemon's part before the VMM process exists: the
//     sandbox's directory, its image, network, restore files and jail;
//   - Spawn: the VMM process's clone and exec (its namespaces and cgroup
//     included);
//   - Agent: from the process to the guest's agent answering: the VMM's
//     runtime start, jail and build, the guest's boot or restore, the
//     ready signal and the handshake;
//   - Renew: what a restored guest is given next: its env, and a fork's
//     or template start's fresh entropy, clock, identity and network.
//
// It is what the bench breaks a start down by (issue 28: where a missed
// goal's time goes).
type startSteps struct {
	Prepare, Spawn, Agent, Renew time.Duration
	// Pooled: the VMM process came from the pool (vmmpool.go), and
	// Spawn is its claim.
	Pooled bool
}

// LogValue is the "steps" of the "sandbox created" line, in milliseconds.
func (s startSteps) LogValue() slog.Value {
	return slog.StringValue(s.String())
}

func (s startSteps) String() string {
	out := fmt.Sprintf("prepare=%d spawn=%d agent=%d renew=%d", s.Prepare.Milliseconds(), s.Spawn.Milliseconds(), s.Agent.Milliseconds(), s.Renew.Milliseconds())
	if s.Pooled {
		out += " pooled=1"
	}
	return out
}
