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
		{"kvm_vcpu_events", unsafe.Sizeof(VCPUEvents{}), 64},
		{"kvm_debugregs", unsafe.Sizeof(DebugRegs{}), 128},
		{"kvm_clock_data", unsafe.Sizeof(ClockData{}), 48},
		{"kvm_pit_channel_state", unsafe.Sizeof(PITChannel{}), 24},
		{"kvm_pit_state2", unsafe.Sizeof(PITState2{}), 112},
		{"kvm_irqchip", unsafe.Sizeof(IRQChip{}), 520},
		{"kvm_mp_state", unsafe.Sizeof(mpState{}), 4},
		{"kvm_msr_list", unsafe.Sizeof(msrList{}), 4},
		{"kvm_lapic_state", unsafe.Sizeof(LAPICState{}), 1024},
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
		{"KVM_GET_MSR_INDEX_LIST", ioctlGetMSRIndexList, 0xC004AE02},
		{"KVM_GET_XSAVE", ioctlGetXSAVE, 0x9000AEA4},
		{"KVM_SET_XSAVE", ioctlSetXSAVE, 0x5000AEA5},
		{"KVM_GET_XSAVE2", ioctlGetXSAVE2, 0x9000AECF},
		{"KVM_GET_VCPU_EVENTS", ioctlGetVCPUEvents, 0x8040AE9F},
		{"KVM_SET_VCPU_EVENTS", ioctlSetVCPUEvents, 0x4040AEA0},
		{"KVM_GET_MP_STATE", ioctlGetMPState, 0x8004AE98},
		{"KVM_SET_MP_STATE", ioctlSetMPState, 0x4004AE99},
		{"KVM_GET_DEBUGREGS", ioctlGetDebugRegs, 0x8080AEA1},
		{"KVM_SET_DEBUGREGS", ioctlSetDebugRegs, 0x4080AEA2},
		{"KVM_GET_IRQCHIP", ioctlGetIRQChip, 0xC208AE62},
		{"KVM_SET_IRQCHIP", ioctlSetIRQChip, 0x8208AE63},
		{"KVM_GET_PIT2", ioctlGetPIT2, 0x8070AE9F},
		{"KVM_SET_PIT2", ioctlSetPIT2, 0x4070AEA0},
		{"KVM_GET_CLOCK", ioctlGetClock, 0x8030AE7C},
		{"KVM_SET_CLOCK", ioctlSetClock, 0x4030AE7B},
		{"KVM_KVMCLOCK_CTRL", ioctlKVMClockCtrl, 0xAEAD},
		{"KVM_GET_CPUID2", ioctlGetCPUID2, 0xC008AE91},
		{"KVM_GET_TSC_KHZ", ioctlGetTSCKHz, 0xAEA3},
		{"KVM_SET_TSC_KHZ", ioctlSetTSCKHz, 0xAEA2},
		{"KVM_GET_LAPIC", ioctlGetLAPIC, 0x8400AE8E},
		{"KVM_SET_LAPIC", ioctlSetLAPIC, 0x4400AE8F},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// Field offsets inside the state structures whose layout Go could get
// wrong silently (nested structs, padding before a 64-bit field), from
// <linux/kvm.h> and <asm/kvm.h> on x86-64.
func TestStateFieldOffsets(t *testing.T) {
	var e VCPUEvents
	var c ClockData
	var p PITState2
	var ch PITChannel
	var d DebugRegs
	var q IRQChip
	for _, o := range []struct {
		name      string
		got, want uintptr
	}{
		{"kvm_vcpu_events.interrupt", unsafe.Offsetof(e.Interrupt), 8},
		{"kvm_vcpu_events.nmi", unsafe.Offsetof(e.NMI), 12},
		{"kvm_vcpu_events.sipi_vector", unsafe.Offsetof(e.SIPIVector), 16},
		{"kvm_vcpu_events.flags", unsafe.Offsetof(e.Flags), 20},
		{"kvm_vcpu_events.smi", unsafe.Offsetof(e.SMI), 24},
		{"kvm_vcpu_events.triple_fault", unsafe.Offsetof(e.TripleFault), 28},
		{"kvm_vcpu_events.exception_has_payload", unsafe.Offsetof(e.ExceptionHasPayload), 55},
		{"kvm_vcpu_events.exception_payload", unsafe.Offsetof(e.ExceptionPayload), 56},
		{"kvm_clock_data.flags", unsafe.Offsetof(c.Flags), 8},
		{"kvm_clock_data.realtime", unsafe.Offsetof(c.Realtime), 16},
		{"kvm_clock_data.host_tsc", unsafe.Offsetof(c.HostTSC), 24},
		{"kvm_pit_state2.flags", unsafe.Offsetof(p.Flags), 72},
		{"kvm_pit_channel_state.count_load_time", unsafe.Offsetof(ch.CountLoadTime), 16},
		{"kvm_debugregs.dr7", unsafe.Offsetof(d.DR7), 40},
		{"kvm_debugregs.flags", unsafe.Offsetof(d.Flags), 48},
		{"kvm_irqchip.chip", unsafe.Offsetof(q.Chip), 8},
	} {
		if o.got != o.want {
			t.Errorf("offsetof(%s) = %d, want %d", o.name, o.got, o.want)
		}
	}
}
