package engine

import (
	"testing"

	"github.com/cellvm/cellvm/vmm/control"
)

// A VMM's cgroup allows one CPU per vCPU and half a CPU for its own
// threads: with the vCPUs' share alone a booting guest throttled its own
// devices (issue 28's jail bench).
func TestVMCgroupLimitsLeaveTheDevicesRoom(t *testing.T) {
	for _, c := range []struct{ vcpus, want int }{{1, 1500}, {2, 2500}, {4, 4500}} {
		l := vmCgroupLimits(&control.Spec{VCPUs: c.vcpus, MemoryMiB: 384})
		if l.CPUMilli != c.want {
			t.Errorf("%d vCPUs: CPUMilli %d, want %d", c.vcpus, l.CPUMilli, c.want)
		}
		if l.MemoryBytes != (384+jailMemOverheadMiB)<<20 {
			t.Errorf("%d vCPUs: memory.max %d", c.vcpus, l.MemoryBytes)
		}
	}
}
