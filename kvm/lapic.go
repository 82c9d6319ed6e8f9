package kvm

import (
	"encoding/binary"
	"unsafe"
)

// LAPICState is struct kvm_lapic_state: the local APIC's register page.
type LAPICState struct {
	Regs [1024]byte
}

// Local APIC register offsets and LVT delivery modes.
const (
	APICLVTLINT0   = 0x350
	APICLVTLINT1   = 0x360
	APICModeNMI    = 0x4
	APICModeExtINT = 0x7
)

var (
	ioctlGetLAPIC = ior(0x8e, sizeOf[LAPICState]())
	ioctlSetLAPIC = iow(0x8f, sizeOf[LAPICState]())
)

// LAPIC returns the local APIC state.
func (c *VCPU) LAPIC() (LAPICState, error) {
	var s LAPICState
	return s, c.get("KVM_GET_LAPIC", ioctlGetLAPIC, unsafe.Pointer(&s))
}

// SetLAPIC sets the local APIC state.
func (c *VCPU) SetLAPIC(s LAPICState) error {
	return c.get("KVM_SET_LAPIC", ioctlSetLAPIC, unsafe.Pointer(&s))
}

// SetLVTMode sets the delivery mode of the LVT entry at off.
func (s *LAPICState) SetLVTMode(off int, mode uint32) {
	v := binary.LittleEndian.Uint32(s.Regs[off:])
	v = v&^0x700 | mode<<8
	binary.LittleEndian.PutUint32(s.Regs[off:], v)
}
