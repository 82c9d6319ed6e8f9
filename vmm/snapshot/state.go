// Package snapshot is the state file of a cellvm snapshot: what a paused
// machine writes besides its memory, and what a new VMM process restores
// from. A snapshot is two files: this small state file (the vCPUs, the
// in-kernel interrupt controllers, PIT and clock, every device's state and
// the machine's shape) and a memory file holding guest RAM, region after
// region, which a restore maps MAP_PRIVATE so that many VMs share its
// unchanged pages.
//
// The file is a fixed header (magic, format version, body length, CRC-32C
// of the body, and the CRC-32C of the memory file: memdigest.go) and a
// JSON body. Only one format version is read: a file of
// another version is refused with an error that says so, rather than
// restored into a machine that would misread it. The file is input like
// any other: truncated, corrupt and garbage files are refused without a
// panic, and a decoded state is checked (Validate) before anything uses it.
package snapshot

import (
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio/block"
	"github.com/cellvm/cellvm/virtio/mmio"
	vnet "github.com/cellvm/cellvm/virtio/net"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/vsock"
	"github.com/cellvm/cellvm/vmm/uart"
)

// State is everything a snapshot holds but guest memory.
type State struct {
	// VMMVersion is the cellvm that wrote the file (VMMVersion), for the
	// record: compatibility is the format version's.
	VMMVersion string
	Machine    Machine
	VCPUs      []VCPU
	VM         VM
	UART       uart.State
	BootMarker BootMarker
	// Devices are the virtio devices in the order the machine attached
	// them, which is the order a restore must attach them in.
	Devices []Device
	// ResetVsock says the state was taken live (a checkpoint): the
	// guest's vsock connections were not reset before it, so a restore
	// must reset the guest's vsock transport before its vCPUs run.
	ResetVsock bool `json:",omitempty"`
}

// Machine is the shape of the machine, which a restore rebuilds.
type Machine struct {
	VCPUs     int
	MemoryMiB uint64
	// Memory says where each guest RAM region is in the memory image.
	Memory []MemoryRegion
	// Layers are the files under the snapshot's memory file, base first,
	// when its memory is a chain (layers.go); none when the memory file
	// is a whole image.
	Layers []Layer `json:",omitempty"`
	// Extents say where the memory file's pages go when it is a layer.
	Extents []Extent `json:",omitempty"`
}

// MemoryRegion is one guest RAM region and its place in the memory file.
type MemoryRegion struct {
	GuestAddr  uint64
	Size       uint64
	FileOffset uint64
}

// VCPU is one vCPU's KVM state, in the order it is restored.
type VCPU struct {
	ID        int
	CPUID     []kvm.CPUIDEntry
	MPState   uint32
	Regs      kvm.Regs
	Sregs     kvm.Sregs
	XSAVE     []byte // kvm_xsave, at least kvm.XSAVESize bytes
	XCRs      []kvm.XCR
	DebugRegs kvm.DebugRegs
	LAPIC     []byte // kvm_lapic_state's register page
	MSRs      []kvm.MSR
	Events    kvm.VCPUEvents
}

// VM is the VM-wide KVM state: the in-kernel PIT, PICs and IOAPIC, the
// kvmclock, and the TSC frequency the vCPUs ran at.
type VM struct {
	PIT      kvm.PITState2
	Clock    kvm.ClockData
	IRQChips []IRQChip
	TSCKHz   uint32
}

// IRQChip is one in-kernel interrupt controller's state (kvm.IRQChip's
// union, as bytes).
type IRQChip struct {
	ChipID uint32
	Data   []byte
}

// BootMarker is when the guest wrote the boot marker, if it had.
type BootMarker struct {
	ElapsedNS int64
}

// DeviceKind names a virtio device.
type DeviceKind string

// The device kinds a machine has.
const (
	KindRNG   DeviceKind = "rng"
	KindBlock DeviceKind = "block"
	KindVsock DeviceKind = "vsock"
	KindNet   DeviceKind = "net"
)

// Device is one virtio device: where it sits, its transport's state, and
// its own (the one field of its kind is set).
type Device struct {
	Kind      DeviceKind
	MMIOBase  uint64
	IRQ       uint32
	Transport mmio.State
	RNG       *rng.State   `json:",omitempty"`
	Block     *block.State `json:",omitempty"`
	Vsock     *vsock.State `json:",omitempty"`
	Net       *vnet.State  `json:",omitempty"`
}
