package vmm

import (
	"testing"

	"github.com/cellvm/cellvm/kvm"
)

func leaf(entries []kvm.CPUIDEntry, fn uint32) kvm.CPUIDEntry {
	for _, e := range entries {
		if e.Function == fn {
			return e
		}
	}
	return kvm.CPUIDEntry{}
}

func TestGuestCPUIDTSCDeadlineOnlyWhenKVMHasIt(t *testing.T) {
	supported := []kvm.CPUIDEntry{{Function: 1, ECX: 0x1}, {Function: 6, EAX: 0x4}}
	without := leaf(guestCPUID(supported, 0, 1, cpuFeatures{}), 1)
	if without.ECX&cpuid1ECXTSCDeadline != 0 {
		t.Errorf("leaf 1 ECX = %#x: TSC-deadline offered though KVM did not report it", without.ECX)
	}
	with := leaf(guestCPUID(supported, 0, 1, cpuFeatures{tscDeadline: true}), 1)
	if with.ECX&cpuid1ECXTSCDeadline == 0 {
		t.Errorf("leaf 1 ECX = %#x: TSC-deadline missing though KVM has it", with.ECX)
	}
	if with.ECX&0x1 == 0 || with.ECX&cpuid1ECXHypervisor == 0 {
		t.Errorf("leaf 1 ECX = %#x: lost a supported bit or the hypervisor bit", with.ECX)
	}
	if supported[0].ECX != 0x1 {
		t.Errorf("the supported list was modified: leaf 1 ECX = %#x", supported[0].ECX)
	}
}

func TestGuestCPUIDAPICIDs(t *testing.T) {
	supported := []kvm.CPUIDEntry{{Function: 1, EBX: 0xabcd}, {Function: 0xb}, {Function: 0x8000001e}}
	for id := 0; id < 3; id++ {
		got := guestCPUID(supported, id, 3, cpuFeatures{})
		l1 := leaf(got, 1)
		if apic := l1.EBX >> 24; apic != uint32(id) {
			t.Errorf("vcpu %d: leaf 1 APIC ID %d", id, apic)
		}
		if count := l1.EBX >> 16 & 0xff; count != 3 {
			t.Errorf("vcpu %d: leaf 1 logical count %d, want 3", id, count)
		}
		if l1.EBX&0xffff != 0xabcd {
			t.Errorf("vcpu %d: leaf 1 EBX low half %#x changed", id, l1.EBX&0xffff)
		}
		if l1.EDX&(1<<28) == 0 {
			t.Errorf("vcpu %d: HTT not set with 3 vCPUs", id)
		}
		if x2 := leaf(got, 0xb).EDX; x2 != uint32(id) {
			t.Errorf("vcpu %d: x2APIC ID %d", id, x2)
		}
		if ext := leaf(got, 0x8000001e).EAX; ext != uint32(id) {
			t.Errorf("vcpu %d: extended APIC ID %d", id, ext)
		}
	}
}
