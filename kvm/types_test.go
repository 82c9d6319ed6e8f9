package kvm

import (
	"testing"
	"unsafe"
)

// The ioctl numbers encode the structure sizes, so a layout mistake would
// make every call fail with EINVAL or, worse, corrupt memory. These are the
// sizes of <linux/kvm.h> on x86-64.
func TestStructSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"kvm_userspace_memory_region", unsafe.Sizeof(UserspaceMemoryRegion{}), 32},
		{"kvm_regs", unsafe.Sizeof(Regs{}), 144},
		{"kvm_segment", unsafe.Sizeof(Segment{}), 24},
		{"kvm_dtable", unsafe.Sizeof(DTable{}), 16},
		{"kvm_sregs", unsafe.Sizeof(Sregs{}), 312},
		{"kvm_fpu", unsafe.Sizeof(FPU{}), 416},
		{"kvm_cpuid_entry2", unsafe.Sizeof(CPUIDEntry{}), 40},
		{"kvm_msr_entry", unsafe.Sizeof(MSR{}), 16},
		{"kvm_irq_level", unsafe.Sizeof(irqLevel{}), 8},
		{"kvm_pit_config", unsafe.Sizeof(pitConfig{}), 64},
		{"kvm_irqfd", unsafe.Sizeof(irqfd{}), 32},
		{"kvm_ioeventfd", unsafe.Sizeof(ioeventfd{}), 64},
		{"kvm_enable_cap", unsafe.Sizeof(enableCap{}), 104},
		{"kvm_xcr", unsafe.Sizeof(XCR{}), 16},
		{"kvm_xcrs", unsafe.Sizeof(xcrs{}), 392},
	} {
		if c.got != c.want {
			t.Errorf("sizeof(%s) = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// A few ioctl numbers as the kernel headers spell them out.
func TestIoctlNumbers(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"KVM_CREATE_VM", ioctlCreateVM, 0xAE01},
		{"KVM_RUN", ioctlRun, 0xAE80},
		{"KVM_SET_USER_MEMORY_REGION", ioctlSetUserMemoryRegion, 0x4020AE46},
		{"KVM_GET_SUPPORTED_CPUID", ioctlGetSupportedCPUID, 0xC008AE05},
		{"KVM_GET_REGS", ioctlGetRegs, 0x8090AE81},
		{"KVM_SET_SREGS", ioctlSetSregs, 0x4138AE84},
		{"KVM_SET_FPU", ioctlSetFPU, 0x41A0AE8D},
		{"KVM_IRQFD", ioctlIRQFD, 0x4020AE76},
		{"KVM_IOEVENTFD", ioctlIOEventFD, 0x4040AE79},
		{"KVM_CREATE_PIT2", ioctlCreatePIT2, 0x4040AE77},
		{"KVM_SET_CPUID2", ioctlSetCPUID2, 0x4008AE90},
		{"KVM_SET_MSRS", ioctlSetMSRs, 0x4008AE89},
		{"KVM_ENABLE_CAP", ioctlEnableCap, 0x4068AEA3},
		{"KVM_GET_XCRS", ioctlGetXCRS, 0x8188AEA6},
		{"KVM_SET_XCRS", ioctlSetXCRS, 0x4188AEA7},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}
