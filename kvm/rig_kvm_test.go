package kvm

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRigKeepsGuestsOffCPU0 checks, inside the nested rig, that the tests
// (and so every KVM_RUN under them) cannot run on L1's CPU 0. QEMU's TCG
// (10.0.2, the rig's) rewrites the first vCPU's hflags2 from other vCPU
// threads on every FPU-environment restore, and when that vCPU is entering
// or leaving a guest the rewrite puts stale SVM bits back (nested paging,
// GIF): the guest then runs L1's registers, hangs or triple-faults.
// test/nested/init.sh pins the command off CPU 0; without that pin this
// test fails. See test/nested/README.md, "Why L2 guests crashed".
func TestRigKeepsGuestsOffCPU0(t *testing.T) {
	if os.Getenv("CELLVM_RIG") != "1" {
		t.Skip("checks the nested rig's CPU pinning; runs only in the rig (CELLVM_RIG=1)")
	}
	cpuinfo, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatalf("read /proc/cpuinfo: %v", err)
	}
	online := 0
	for _, line := range strings.Split(string(cpuinfo), "\n") {
		if strings.HasPrefix(line, "processor") {
			online++
		}
	}
	if online < 2 {
		t.Skipf("L1 has %d CPU; there is no other CPU to keep guests on", online)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	if set.IsSet(0) {
		t.Fatalf("this test may run on CPU 0 of %d (affinity %d CPUs): L2 guests started from here can run on L1's first vCPU, whose flags QEMU's TCG corrupts; test/nested/init.sh should run the command under taskset -c 1-%d", online, set.Count(), online-1)
	}
	if set.Count() != online-1 {
		t.Errorf("affinity has %d CPUs, want all %d but CPU 0", set.Count(), online-1)
	}
}
