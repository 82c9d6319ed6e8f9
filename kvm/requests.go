package kvm

// Requests is every ioctl request number this package issues, by its
// <linux/kvm.h> name. The VMM's seccomp filter (package jail) allows the
// few it needs once jailed by these numbers, taken from here rather than
// written out again, so that the filter and the calls cannot drift apart
// (a request number encodes its argument's size, which a struct change
// would move).
func Requests() map[string]uintptr {
	return map[string]uintptr{
		"KVM_GET_API_VERSION":        ioctlGetAPIVersion,
		"KVM_CREATE_VM":              ioctlCreateVM,
		"KVM_GET_MSR_INDEX_LIST":     ioctlGetMSRIndexList,
		"KVM_CHECK_EXTENSION":        ioctlCheckExtension,
		"KVM_GET_VCPU_MMAP_SIZE":     ioctlGetVCPUMmapSize,
		"KVM_GET_SUPPORTED_CPUID":    ioctlGetSupportedCPUID,
		"KVM_CREATE_VCPU":            ioctlCreateVCPU,
		"KVM_GET_DIRTY_LOG":          ioctlGetDirtyLog,
		"KVM_SET_USER_MEMORY_REGION": ioctlSetUserMemoryRegion,
		"KVM_SET_TSS_ADDR":           ioctlSetTSSAddr,
		"KVM_SET_IDENTITY_MAP_ADDR":  ioctlSetIdentityMapAddr,
		"KVM_CREATE_IRQCHIP":         ioctlCreateIRQChip,
		"KVM_IRQ_LINE":               ioctlIRQLine,
		"KVM_GET_IRQCHIP":            ioctlGetIRQChip,
		"KVM_SET_IRQCHIP":            ioctlSetIRQChip,
		"KVM_IRQFD":                  ioctlIRQFD,
		"KVM_CREATE_PIT2":            ioctlCreatePIT2,
		"KVM_IOEVENTFD":              ioctlIOEventFD,
		"KVM_SET_CLOCK":              ioctlSetClock,
		"KVM_GET_CLOCK":              ioctlGetClock,
		"KVM_RUN":                    ioctlRun,
		"KVM_GET_REGS":               ioctlGetRegs,
		"KVM_SET_REGS":               ioctlSetRegs,
		"KVM_GET_SREGS":              ioctlGetSregs,
		"KVM_SET_SREGS":              ioctlSetSregs,
		"KVM_GET_MSRS":               ioctlGetMSRs,
		"KVM_SET_MSRS":               ioctlSetMSRs,
		"KVM_GET_FPU":                ioctlGetFPU,
		"KVM_SET_FPU":                ioctlSetFPU,
		"KVM_GET_LAPIC":              ioctlGetLAPIC,
		"KVM_SET_LAPIC":              ioctlSetLAPIC,
		"KVM_SET_CPUID2":             ioctlSetCPUID2,
		"KVM_GET_CPUID2":             ioctlGetCPUID2,
		"KVM_GET_MP_STATE":           ioctlGetMPState,
		"KVM_SET_MP_STATE":           ioctlSetMPState,
		"KVM_GET_PIT2":               ioctlGetPIT2,
		"KVM_SET_PIT2":               ioctlSetPIT2,
		"KVM_GET_VCPU_EVENTS":        ioctlGetVCPUEvents,
		"KVM_SET_VCPU_EVENTS":        ioctlSetVCPUEvents,
		"KVM_GET_DEBUGREGS":          ioctlGetDebugRegs,
		"KVM_SET_DEBUGREGS":          ioctlSetDebugRegs,
		"KVM_ENABLE_CAP":             ioctlEnableCap,
		"KVM_SET_TSC_KHZ":            ioctlSetTSCKHz,
		"KVM_GET_TSC_KHZ":            ioctlGetTSCKHz,
		"KVM_GET_XSAVE":              ioctlGetXSAVE,
		"KVM_SET_XSAVE":              ioctlSetXSAVE,
		"KVM_GET_XCRS":               ioctlGetXCRS,
		"KVM_SET_XCRS":               ioctlSetXCRS,
		"KVM_KVMCLOCK_CTRL":          ioctlKVMClockCtrl,
		"KVM_GET_XSAVE2":             ioctlGetXSAVE2,
	}
}
