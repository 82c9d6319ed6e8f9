package process

import (
	"runtime"
	"testing"
)

// TestEnoughProcs: the VMM has a P for each vCPU and one for its devices,
// and never fewer Ps than it started with.
func TestEnoughProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	enoughProcs(2)
	if n := runtime.GOMAXPROCS(0); n != 3 {
		t.Fatalf("GOMAXPROCS 1 with 2 vCPUs became %d, want 3", n)
	}
	runtime.GOMAXPROCS(8)
	enoughProcs(2)
	if n := runtime.GOMAXPROCS(0); n != 8 {
		t.Fatalf("GOMAXPROCS 8 with 2 vCPUs became %d, want 8 (never lowered)", n)
	}
}
