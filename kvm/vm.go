package kvm

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// VM is a KVM virtual machine file descriptor.
type VM struct {
	fd       int
	sys      *System
	mmapSize int
}

// Close closes the VM. Its vCPUs must be closed first.
func (vm *VM) Close() error { return unix.Close(vm.fd) }

// FD returns the VM file descriptor.
func (vm *VM) FD() int { return vm.fd }

// SetUserMemoryRegion maps host memory at hostAddr into the guest.
func (vm *VM) SetUserMemoryRegion(r UserspaceMemoryRegion) error {
	_, err := ioctl(vm.fd, "KVM_SET_USER_MEMORY_REGION", ioctlSetUserMemoryRegion, ptr(&r))
	return err
}

// SetTSSAddr sets the three-page region KVM uses for the real-mode TSS
// (Intel needs it; harmless elsewhere).
func (vm *VM) SetTSSAddr(addr uint64) error {
	_, err := ioctl(vm.fd, "KVM_SET_TSS_ADDR", ioctlSetTSSAddr, uintptr(addr))
	return err
}

// SetIdentityMapAddr sets the one-page region for the real-mode identity map.
func (vm *VM) SetIdentityMapAddr(addr uint64) error {
	_, err := ioctl(vm.fd, "KVM_SET_IDENTITY_MAP_ADDR", ioctlSetIdentityMapAddr, ptr(&addr))
	return err
}

// CreateIRQChip creates the in-kernel PIC, IOAPIC and local APICs.
func (vm *VM) CreateIRQChip() error {
	_, err := ioctl(vm.fd, "KVM_CREATE_IRQCHIP", ioctlCreateIRQChip, 0)
	return err
}

// CreatePIT2 creates the in-kernel i8254 PIT (with a dummy speaker port).
func (vm *VM) CreatePIT2() error {
	c := pitConfig{Flags: pitSpeakerDummy}
	_, err := ioctl(vm.fd, "KVM_CREATE_PIT2", ioctlCreatePIT2, ptr(&c))
	return err
}

// IRQLine sets the level of interrupt line (GSI) irq.
func (vm *VM) IRQLine(irq uint32, level bool) error {
	l := irqLevel{IRQ: irq}
	if level {
		l.Level = 1
	}
	_, err := ioctl(vm.fd, "KVM_IRQ_LINE", ioctlIRQLine, ptr(&l))
	return err
}

// RegisterIRQFD makes a write to eventfd efd raise GSI gsi.
func (vm *VM) RegisterIRQFD(efd int, gsi uint32) error {
	c := irqfd{FD: uint32(efd), GSI: gsi}
	_, err := ioctl(vm.fd, "KVM_IRQFD", ioctlIRQFD, ptr(&c))
	return err
}

// UnregisterIRQFD undoes RegisterIRQFD.
func (vm *VM) UnregisterIRQFD(efd int, gsi uint32) error {
	c := irqfd{FD: uint32(efd), GSI: gsi, Flags: irqfdFlagDeassign}
	_, err := ioctl(vm.fd, "KVM_IRQFD (deassign)", ioctlIRQFD, ptr(&c))
	return err
}

// IOEventFD describes a guest write that KVM turns into an eventfd signal
// instead of an exit to the VMM.
type IOEventFD struct {
	FD        int
	Addr      uint64
	Len       uint32 // 0 (any), 1, 2, 4 or 8
	PIO       bool
	Datamatch *uint64 // when set, only writes of this value signal
}

func (e IOEventFD) raw(deassign bool) ioeventfd {
	c := ioeventfd{Addr: e.Addr, Len: e.Len, FD: int32(e.FD)}
	if e.PIO {
		c.Flags |= ioeventfdFlagPIO
	}
	if e.Datamatch != nil {
		c.Flags |= ioeventfdFlagDatamatch
		c.Datamatch = *e.Datamatch
	}
	if deassign {
		c.Flags |= ioeventfdFlagDeassign
	}
	return c
}

// RegisterIOEventFD registers e.
func (vm *VM) RegisterIOEventFD(e IOEventFD) error {
	c := e.raw(false)
	_, err := ioctl(vm.fd, "KVM_IOEVENTFD", ioctlIOEventFD, ptr(&c))
	return err
}

// UnregisterIOEventFD removes e.
func (vm *VM) UnregisterIOEventFD(e IOEventFD) error {
	c := e.raw(true)
	_, err := ioctl(vm.fd, "KVM_IOEVENTFD (deassign)", ioctlIOEventFD, ptr(&c))
	return err
}

// CreateVCPU creates vCPU id and maps its kvm_run area.
func (vm *VM) CreateVCPU(id int) (*VCPU, error) {
	r, err := ioctl(vm.fd, "KVM_CREATE_VCPU", ioctlCreateVCPU, uintptr(id))
	if err != nil {
		return nil, fmt.Errorf("vcpu %d: %w", id, err)
	}
	fd := int(r)
	mem, err := unix.Mmap(fd, 0, vm.mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap kvm_run of vcpu %d: %w", id, err)
	}
	return &VCPU{ID: id, fd: fd, run: mem}, nil
}

// EnableCap turns on a VM capability with its arguments (KVM_ENABLE_CAP on
// the VM). Some, such as CapPMUCapability, must be set before any vCPU is
// created.
func (vm *VM) EnableCap(cap uint32, args ...uint64) error {
	c := enableCap{Cap: cap}
	if len(args) > len(c.Args) {
		return fmt.Errorf("KVM_ENABLE_CAP %d: %d arguments, at most %d", cap, len(args), len(c.Args))
	}
	copy(c.Args[:], args)
	_, err := ioctl(vm.fd, fmt.Sprintf("KVM_ENABLE_CAP(%d)", cap), ioctlEnableCap, ptr(&c))
	return err
}
