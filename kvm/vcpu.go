package kvm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// VCPU is a virtual CPU file descriptor with its mmapped kvm_run area.
// Run must be called from one OS thread at a time; Kick may be called from
// any goroutine.
type VCPU struct {
	ID  int
	fd  int
	run []byte
	tid atomic.Int32 // OS thread in Run, for Kick
}

// Close unmaps kvm_run and closes the vCPU.
func (c *VCPU) Close() error {
	if err := unix.Munmap(c.run); err != nil {
		return fmt.Errorf("munmap kvm_run: %w", err)
	}
	return unix.Close(c.fd)
}

// FD returns the vCPU file descriptor.
func (c *VCPU) FD() int { return c.fd }

func (c *VCPU) get(name string, req uintptr, p unsafe.Pointer) error {
	_, err := ioctl(c.fd, name, req, uintptr(p))
	if err != nil {
		return fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	return nil
}

// Regs returns the general-purpose registers.
func (c *VCPU) Regs() (Regs, error) {
	var r Regs
	return r, c.get("KVM_GET_REGS", ioctlGetRegs, unsafe.Pointer(&r))
}

// SetRegs sets the general-purpose registers.
func (c *VCPU) SetRegs(r Regs) error { return c.get("KVM_SET_REGS", ioctlSetRegs, unsafe.Pointer(&r)) }

// Sregs returns the special registers.
func (c *VCPU) Sregs() (Sregs, error) {
	var r Sregs
	return r, c.get("KVM_GET_SREGS", ioctlGetSregs, unsafe.Pointer(&r))
}

// SetSregs sets the special registers.
func (c *VCPU) SetSregs(r Sregs) error {
	return c.get("KVM_SET_SREGS", ioctlSetSregs, unsafe.Pointer(&r))
}

// FPU returns the FPU state.
func (c *VCPU) FPU() (FPU, error) {
	var f FPU
	return f, c.get("KVM_GET_FPU", ioctlGetFPU, unsafe.Pointer(&f))
}

// SetFPU sets the FPU state.
func (c *VCPU) SetFPU(f FPU) error { return c.get("KVM_SET_FPU", ioctlSetFPU, unsafe.Pointer(&f)) }

// SetCPUID sets the CPUID leaves the guest sees.
func (c *VCPU) SetCPUID(entries []CPUIDEntry) error {
	es := int(unsafe.Sizeof(CPUIDEntry{}))
	buf := make([]byte, 8+len(entries)*es)
	binary.LittleEndian.PutUint32(buf, uint32(len(entries)))
	for i := range entries {
		*(*CPUIDEntry)(unsafe.Pointer(&buf[8+i*es])) = entries[i]
	}
	return c.get("KVM_SET_CPUID2", ioctlSetCPUID2, unsafe.Pointer(&buf[0]))
}

func msrBuf(msrs []MSR) []byte {
	es := int(unsafe.Sizeof(MSR{}))
	buf := make([]byte, 8+len(msrs)*es)
	binary.LittleEndian.PutUint32(buf, uint32(len(msrs)))
	for i := range msrs {
		*(*MSR)(unsafe.Pointer(&buf[8+i*es])) = msrs[i]
	}
	return buf
}

// SetMSRs writes model-specific registers; it fails unless all were set.
func (c *VCPU) SetMSRs(msrs []MSR) error {
	if len(msrs) == 0 {
		return nil
	}
	buf := msrBuf(msrs)
	n, err := ioctl(c.fd, "KVM_SET_MSRS", ioctlSetMSRs, uintptr(unsafe.Pointer(&buf[0])))
	if err != nil {
		return fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	if int(n) != len(msrs) {
		return fmt.Errorf("vcpu %d: KVM_SET_MSRS: set %d of %d (refused MSR %#x)", c.ID, n, len(msrs), msrs[n].Index)
	}
	return nil
}

// MSRs reads the model-specific registers named by the Index of each entry.
func (c *VCPU) MSRs(indexes ...uint32) ([]MSR, error) {
	in := make([]MSR, len(indexes))
	for i, x := range indexes {
		in[i].Index = x
	}
	buf := msrBuf(in)
	n, err := ioctl(c.fd, "KVM_GET_MSRS", ioctlGetMSRs, uintptr(unsafe.Pointer(&buf[0])))
	if err != nil {
		return nil, fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	es := int(unsafe.Sizeof(MSR{}))
	out := make([]MSR, n)
	for i := range out {
		out[i] = *(*MSR)(unsafe.Pointer(&buf[8+i*es]))
	}
	return out, nil
}

// XCRs returns the vCPU's extended control registers (XCR0).
func (c *VCPU) XCRs() ([]XCR, error) {
	var x xcrs
	if err := c.get("KVM_GET_XCRS", ioctlGetXCRS, unsafe.Pointer(&x)); err != nil {
		return nil, err
	}
	n := min(int(x.N), maxXCRs)
	return append([]XCR(nil), x.XCRs[:n]...), nil
}

// SetXCRs sets extended control registers. KVM checks each against the
// CPUID set before (SetCPUID first).
func (c *VCPU) SetXCRs(regs []XCR) error {
	if len(regs) > maxXCRs {
		return fmt.Errorf("vcpu %d: KVM_SET_XCRS: %d registers, at most %d", c.ID, len(regs), maxXCRs)
	}
	x := xcrs{N: uint32(len(regs))}
	copy(x.XCRs[:], regs)
	return c.get("KVM_SET_XCRS", ioctlSetXCRS, unsafe.Pointer(&x))
}

// MP states (struct kvm_mp_state).
const (
	MPStateRunnable      = 0
	MPStateUninitialized = 1
	MPStateInitReceived  = 2
	MPStateHalted        = 3
	MPStateSIPIReceived  = 4
)

// MPState returns the vCPU's multiprocessing state (KVM_GET_MP_STATE).
func (c *VCPU) MPState() (uint32, error) {
	var s uint32
	return s, c.get("KVM_GET_MP_STATE", ioctlGetMPState, unsafe.Pointer(&s))
}
