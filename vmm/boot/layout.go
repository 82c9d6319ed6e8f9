package boot

// Guest physical layout of the boot structures, all below 1 MiB.
const (
	GDTAddr      = 0x500
	IDTAddr      = 0x520
	ZeroPageAddr = 0x7000
	StackTop     = 0x8ff0
	PML4Addr     = 0x9000
	PDPTAddr     = 0xa000
	PDAddr       = 0xb000 // four page directories, 0xb000..0xefff
	IdentityGiB  = 4      // identity-mapped gigabytes
	CmdlineAddr  = 0x20000
	CmdlineMax   = 0x10000
	MPTableAddr  = 0x9fc00 // last KiB of base memory, where Linux looks for it
	EBDAStart    = 0x9fc00
	HighMemStart = 0x100000 // 1 MiB: the kernel goes here or above
	LAPICAddr    = 0xfee00000
	IOAPICAddr   = 0xfec00000
	MMIOGapStart = 0xc0000000 // 3 GiB: devices live between here and 4 GiB
	MMIOGapEnd   = 0x100000000
	VirtioMMIO   = 0xd0000000 // first virtio-mmio window
	MaxVCPUs     = 32         // what fits in the 1 KiB MP table area
	IOAPICPins   = 24
)

// Segment selectors of the boot GDT, as the 64-bit boot protocol names them.
const (
	BootCS = 0x10
	BootDS = 0x18
	BootTR = 0x20
)
