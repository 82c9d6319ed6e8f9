package kvm

import "testing"

// TestRequestNumbers checks Requests against the numbers <linux/kvm.h>
// gives on x86-64 (as `printf("%#lx", KVM_...)` prints them), for the
// ones the jailed VMM is allowed and a few it is not; and that no two
// names share a number.
func TestRequestNumbers(t *testing.T) {
	want := map[string]uintptr{
		"KVM_CREATE_VM":              0xae01,
		"KVM_GET_MSR_INDEX_LIST":     0xc004ae02,
		"KVM_CHECK_EXTENSION":        0xae03,
		"KVM_IRQ_LINE":               0x4008ae61,
		"KVM_GET_IRQCHIP":            0xc208ae62,
		"KVM_IRQFD":                  0x4020ae76,
		"KVM_IOEVENTFD":              0x4040ae79,
		"KVM_GET_CLOCK":              0x8030ae7c,
		"KVM_RUN":                    0xae80,
		"KVM_GET_REGS":               0x8090ae81,
		"KVM_GET_SREGS":              0x8138ae83,
		"KVM_GET_MSRS":               0xc008ae88,
		"KVM_GET_LAPIC":              0x8400ae8e,
		"KVM_GET_CPUID2":             0xc008ae91,
		"KVM_GET_MP_STATE":           0x8004ae98,
		"KVM_GET_PIT2":               0x8070ae9f,
		"KVM_GET_VCPU_EVENTS":        0x8040ae9f,
		"KVM_GET_DEBUGREGS":          0x8080aea1,
		"KVM_GET_TSC_KHZ":            0xaea3,
		"KVM_GET_XSAVE":              0x9000aea4,
		"KVM_GET_XCRS":               0x8188aea6,
		"KVM_KVMCLOCK_CTRL":          0xaead,
		"KVM_GET_XSAVE2":             0x9000aecf,
		"KVM_SET_USER_MEMORY_REGION": 0x4020ae46,
		"KVM_SET_REGS":               0x4090ae82,
		"KVM_GET_DIRTY_LOG":          0x4010ae42,
	}
	got := Requests()
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s = %#x, want %#x", name, got[name], n)
		}
	}
	seen := map[uintptr]string{}
	for name, n := range got {
		if other, dup := seen[n]; dup {
			t.Errorf("%s and %s are both %#x", name, other, n)
		}
		seen[n] = name
	}
}
