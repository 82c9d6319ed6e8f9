package vmm

import (
	"fmt"
	"strings"
	"time"
)

// setupTimes records how long each step of a machine's setup took (KVM's
// objects, guest memory, the kernel's load, the devices, the boot
// structures, the vCPUs), for the "vm starting" log line. A boot's time
// is the VMM's setup, then the guest's own: the bench (test/bench) reads
// this line to show the VMM's share step by step.
type setupTimes struct {
	last  time.Time
	steps []string
}

// mark ends the step named step, begun at the previous mark; a mark with
// no name (the first) only starts the clock, so what runs between two
// setup phases is not counted.
func (s *setupTimes) mark(step string) {
	now := time.Now()
	if step != "" && !s.last.IsZero() {
		s.steps = append(s.steps, fmt.Sprintf("%s=%.1fms", step, float64(now.Sub(s.last).Microseconds())/1000))
	}
	s.last = now
}

// String is the steps in order, "kvm=1.2ms memory=0.1ms ...".
func (s *setupTimes) String() string { return strings.Join(s.steps, " ") }
