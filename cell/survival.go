package cell

// Survival is what became of a cell's interpreter state, derived from
// StateKept and KilledBy, never from Status alone: a timeout whose
// interpreter had to be killed is a timeout too, but its variables are
// gone. Every front end's words (the tool loop, MCP, the CLI, the compat
// layers' mirrors) come from it, so they cannot disagree.
type Survival int

const (
	// Kept: the cell ended and the variables are there.
	Kept Survival = iota
	// KeptAfterTimeout: the cell was interrupted at its timeout and the
	// interpreter survived it.
	KeptAfterTimeout
	// GoneTimeout: the cell did not stop when interrupted; the
	// interpreter was killed and restarted.
	GoneTimeout
	// GoneOOM: the cell ran out of memory; the interpreter was killed.
	GoneOOM
	// GoneLost: the interpreter crashed, exited or was killed by a signal.
	GoneLost
	// GoneFresh: the cell ran in a fresh interpreter (the previous one had
	// ended), so earlier cells' variables are gone.
	GoneFresh
)

// Survival classifies r (see the type).
func (r Result) Survival() Survival {
	killed := r.KilledBy == KilledByOOM || r.KilledBy == KilledBySignal
	if r.StateKept && r.Status != StatusLost && !killed {
		if r.Status == StatusTimeout || r.KilledBy == KilledByTimeout {
			return KeptAfterTimeout
		}
		return Kept
	}
	switch {
	case r.KilledBy == KilledByTimeout || r.Status == StatusTimeout:
		return GoneTimeout
	case r.KilledBy == KilledByOOM:
		return GoneOOM
	case r.KilledBy == KilledBySignal || r.Status == StatusLost:
		return GoneLost
	}
	return GoneFresh
}
