package snapshot

import (
	"fmt"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/boot"
	"github.com/cellvm/cellvm/vmm/uart"
)

// Bounds of a state a restore accepts.
const (
	MinMemoryMiB = 32
	MaxMemoryMiB = 1 << 20
	MaxDevices   = 32
	maxXSAVE     = 1 << 20
	maxCPUID     = 4096
	maxMSRs      = 4096
	maxXCRs      = 16
	maxQueues    = 16
)

// Validate checks that st describes a machine cellvm can build: its shape,
// the size of every KVM state blob, and that each device has the state of
// its kind. It does not check the values KVM and the devices check
// themselves when they take them.
func (st *State) Validate() error {
	if err := st.validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// validateAs is Validate for a state file of format version v, whose
// memory v says the shape of: a whole image (FormatVersion) or a chain
// (LayeredFormatVersion). alone allows a version 1 file's memory extents
// with no chain under them: a checkpoint layer's own state file
// (checkpoint.go), which only DecodeCheckpoint reads.
func (st *State) validateAs(v uint32, alone bool) error {
	if err := st.validateShape(alone); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if layered := v == LayeredFormatVersion; layered != st.Machine.Layered() {
		return fmt.Errorf("%w: a version %d file whose memory layered=%v", ErrCorrupt, v, st.Machine.Layered())
	}
	return nil
}

func (st *State) validate() error { return st.validateShape(false) }

// validateShape is validate; alone allows memory extents with no chain
// under them (a checkpoint layer's own state file).
func (st *State) validateShape(alone bool) error {
	m := st.Machine
	if m.VCPUs < 1 || m.VCPUs > boot.MaxVCPUs {
		return fmt.Errorf("%d vCPUs (1 to %d)", m.VCPUs, boot.MaxVCPUs)
	}
	if m.MemoryMiB < MinMemoryMiB || m.MemoryMiB > MaxMemoryMiB {
		return fmt.Errorf("%d MiB of memory (%d to %d)", m.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	}
	want := MemoryLayout(m.MemoryMiB)
	if len(m.Memory) != len(want) {
		return fmt.Errorf("%d memory regions, %d MiB has %d", len(m.Memory), m.MemoryMiB, len(want))
	}
	for i := range want {
		if m.Memory[i] != want[i] {
			return fmt.Errorf("memory region %d is %+v, want %+v", i, m.Memory[i], want[i])
		}
	}
	if err := m.validateChain(alone); err != nil {
		return err
	}
	if len(st.VCPUs) != m.VCPUs {
		return fmt.Errorf("%d vCPU states for %d vCPUs", len(st.VCPUs), m.VCPUs)
	}
	for i, c := range st.VCPUs {
		if err := c.validate(i); err != nil {
			return fmt.Errorf("vcpu %d: %v", i, err)
		}
	}
	if len(st.VM.IRQChips) != 3 {
		return fmt.Errorf("%d interrupt controllers, want 3 (two PICs and the IOAPIC)", len(st.VM.IRQChips))
	}
	for i, c := range st.VM.IRQChips {
		if c.ChipID != uint32(i) || len(c.Data) != kvm.IRQChipSize {
			return fmt.Errorf("interrupt controller %d: chip %d with %d bytes, want chip %d with %d", i, c.ChipID, len(c.Data), i, kvm.IRQChipSize)
		}
	}
	if len(st.UART.RX) > uart.FIFOSize {
		return fmt.Errorf("%d bytes in the UART's %d-byte FIFO", len(st.UART.RX), uart.FIFOSize)
	}
	if st.BootMarker.ElapsedNS < 0 {
		return fmt.Errorf("boot marker at %d ns", st.BootMarker.ElapsedNS)
	}
	if len(st.Devices) > MaxDevices {
		return fmt.Errorf("%d devices (at most %d)", len(st.Devices), MaxDevices)
	}
	for i, d := range st.Devices {
		if err := d.validate(); err != nil {
			return fmt.Errorf("device %d (%s): %v", i, d.Kind, err)
		}
	}
	return nil
}

func (c *VCPU) validate(i int) error {
	switch {
	case c.ID != i:
		return fmt.Errorf("id %d in place %d", c.ID, i)
	case len(c.CPUID) == 0 || len(c.CPUID) > maxCPUID:
		return fmt.Errorf("%d CPUID leaves", len(c.CPUID))
	case len(c.XSAVE) < kvm.XSAVESize || len(c.XSAVE) > maxXSAVE:
		return fmt.Errorf("XSAVE area of %d bytes", len(c.XSAVE))
	case len(c.XCRs) > maxXCRs:
		return fmt.Errorf("%d XCRs", len(c.XCRs))
	case len(c.LAPIC) != len(kvm.LAPICState{}.Regs):
		return fmt.Errorf("LAPIC page of %d bytes", len(c.LAPIC))
	case len(c.MSRs) > maxMSRs:
		return fmt.Errorf("%d MSRs", len(c.MSRs))
	case c.MPState > kvm.MPStateSIPIReceived:
		return fmt.Errorf("MP state %d", c.MPState)
	}
	return nil
}

func (d *Device) validate() error {
	set := 0
	for _, p := range []bool{d.RNG != nil, d.Block != nil, d.Vsock != nil, d.Net != nil} {
		if p {
			set++
		}
	}
	ok := set == 1
	switch d.Kind {
	case KindRNG:
		ok = ok && d.RNG != nil
	case KindBlock:
		ok = ok && d.Block != nil
	case KindVsock:
		ok = ok && d.Vsock != nil
	case KindNet:
		ok = ok && d.Net != nil
	default:
		return fmt.Errorf("unknown kind %q", d.Kind)
	}
	if !ok {
		return fmt.Errorf("its state is not (only) that of a %s device", d.Kind)
	}
	if len(d.Transport.Queues) > maxQueues || len(d.Transport.Live) > maxQueues {
		return fmt.Errorf("%d queues", max(len(d.Transport.Queues), len(d.Transport.Live)))
	}
	return nil
}

// MemoryLayout is where each guest RAM region of a machine with memMiB MiB
// sits in the memory file: the regions one after the other.
func MemoryLayout(memMiB uint64) []MemoryRegion {
	var out []MemoryRegion
	var off uint64
	for _, r := range boot.RAMRegions(memMiB << 20) {
		out = append(out, MemoryRegion{GuestAddr: r.Addr, Size: r.Size, FileOffset: off})
		off += r.Size
	}
	return out
}
