package kvm

// UserspaceMemoryRegion is struct kvm_userspace_memory_region.
type UserspaceMemoryRegion struct {
	Slot          uint32
	Flags         uint32
	GuestPhysAddr uint64
	MemorySize    uint64
	UserspaceAddr uint64
}

// Regs is struct kvm_regs: the general-purpose registers.
type Regs struct {
	RAX, RBX, RCX, RDX, RSI, RDI, RSP, RBP uint64
	R8, R9, R10, R11, R12, R13, R14, R15   uint64
	RIP, RFLAGS                            uint64
}

// Segment is struct kvm_segment.
type Segment struct {
	Base     uint64
	Limit    uint32
	Selector uint16
	Type     uint8
	Present  uint8
	DPL      uint8
	DB       uint8
	S        uint8
	L        uint8
	G        uint8
	AVL      uint8
	Unusable uint8
	_        uint8
}

// DTable is struct kvm_dtable (a GDT or IDT register).
type DTable struct {
	Base  uint64
	Limit uint16
	_     [3]uint16
}

// Sregs is struct kvm_sregs: segment and control registers.
type Sregs struct {
	CS, DS, ES, FS, GS, SS  Segment
	TR, LDT                 Segment
	GDT, IDT                DTable
	CR0, CR2, CR3, CR4, CR8 uint64
	EFER                    uint64
	APICBase                uint64
	InterruptBitmap         [4]uint64
}

// FPU is struct kvm_fpu.
type FPU struct {
	FPR        [8][16]uint8
	FCW        uint16
	FSW        uint16
	FTWX       uint8
	_          uint8
	LastOpcode uint16
	LastIP     uint64
	LastDP     uint64
	XMM        [16][16]uint8
	MXCSR      uint32
	_          uint32
}

// CPUIDEntry is struct kvm_cpuid_entry2.
type CPUIDEntry struct {
	Function uint32
	Index    uint32
	Flags    uint32
	EAX      uint32
	EBX      uint32
	ECX      uint32
	EDX      uint32
	_        [3]uint32
}

// CPUIDFlagSignificantIndex marks a leaf whose Index (ECX input) matters.
const CPUIDFlagSignificantIndex = 1

// MSR is struct kvm_msr_entry.
type MSR struct {
	Index uint32
	_     uint32
	Data  uint64
}

type irqLevel struct {
	IRQ   uint32
	Level uint32
}

type pitConfig struct {
	Flags uint32
	_     [15]uint32
}

type irqfd struct {
	FD         uint32
	GSI        uint32
	Flags      uint32
	ResampleFD uint32
	_          [16]uint8
}

type ioeventfd struct {
	Datamatch uint64
	Addr      uint64
	Len       uint32
	FD        int32
	Flags     uint32
	_         [36]uint8
}

const (
	ioeventfdFlagDatamatch = 1 << 0
	ioeventfdFlagPIO       = 1 << 1
	irqfdFlagDeassign      = 1 << 0
	ioeventfdFlagDeassign  = 1 << 2
	pitSpeakerDummy        = 1
)

// Capabilities, for CheckExtension.
const (
	CapIRQChip          = 0
	CapUserMemory       = 3
	CapSetTSSAddr       = 4
	CapExtCPUID         = 7
	CapNrVCPUs          = 9
	CapNrMemSlots       = 10
	CapIRQFD            = 32
	CapPIT2             = 33
	CapIOEventFD        = 36
	CapMaxVCPUs         = 66
	CapTSCDeadlineTimer = 72
	CapImmediateExit    = 136
	CapXCRS             = 56
	CapPMUCapability    = 212
)

// PMUCapDisable is KVM_PMU_CAP_DISABLE, the argument of KVM_ENABLE_CAP for
// CapPMUCapability that turns the VM's virtual PMU off.
const PMUCapDisable = 1 << 0

// enableCap is struct kvm_enable_cap.
type enableCap struct {
	Cap   uint32
	Flags uint32
	Args  [4]uint64
	_     [64]uint8
}

// XCR is struct kvm_xcr: one extended control register (XCR0 is 0).
type XCR struct {
	Index uint32
	_     uint32
	Value uint64
}

// maxXCRs is KVM_MAX_XCRS.
const maxXCRs = 16

// xcrs is struct kvm_xcrs.
type xcrs struct {
	N     uint32
	Flags uint32
	XCRs  [maxXCRs]XCR
	_     [16]uint64
}
