package vmm

import (
	"fmt"
	"testing"

	"github.com/cellvm/cellvm/kvm"
)

func TestVCPUDiagCounts(t *testing.T) {
	var d vcpuDiag
	for range 3 {
		d.count(kvm.ExitIO)
	}
	d.count(kvm.ExitMMIO)
	d.count(kvm.ExitReason(1000)) // out of range: "other", never a panic
	d.intr.Add(2)
	got := fmt.Sprint(d.exitCounts())
	want := fmt.Sprint([]any{"KVM_EXIT_IO", uint64(3), "KVM_EXIT_MMIO", uint64(1), "other", uint64(1), "signals", uint64(2)})
	if got != want {
		t.Errorf("exitCounts = %s, want %s", got, want)
	}
}
