package kvm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The state ioctls a snapshot needs: everything KVM keeps about a vCPU, and
// about the VM's in-kernel devices, that the guest's memory does not hold.
// Each structure mirrors <linux/kvm.h> and <asm/kvm.h> (x86-64) byte for
// byte; types_test.go checks the sizes and the ioctl numbers.

// XSAVESize is the size of struct kvm_xsave without its flexible tail: what
// KVM_GET_XSAVE fills. KVM_CHECK_EXTENSION(KVM_CAP_XSAVE2) on the VM says
// when the guest's state needs more (KVM_GET_XSAVE2).
const XSAVESize = 4096

// VCPUEvents is struct kvm_vcpu_events: the exception, interrupt, NMI and SMI
// a vCPU has pending or is injecting, which live neither in the registers
// nor in memory.
type VCPUEvents struct {
	Exception struct {
		Injected, Nr, HasErrorCode, Pending uint8
		ErrorCode                           uint32
	}
	Interrupt struct {
		Injected, Nr, Soft, Shadow uint8
	}
	NMI struct {
		Injected, Pending, Masked uint8
		_                         uint8
	}
	SIPIVector uint32
	Flags      uint32
	SMI        struct {
		SMM, Pending, SMMInsideNMI, LatchedInit uint8
	}
	TripleFault struct {
		Pending uint8
	}
	_                   [26]uint8
	ExceptionHasPayload uint8
	ExceptionPayload    uint64
}

// DebugRegs is struct kvm_debugregs.
type DebugRegs struct {
	DB    [4]uint64
	DR6   uint64
	DR7   uint64
	Flags uint64
	_     [9]uint64
}

// ClockData is struct kvm_clock_data: the VM's kvmclock.
type ClockData struct {
	Clock    uint64 // nanoseconds of guest kvmclock
	Flags    uint32
	_        uint32
	Realtime uint64 // host CLOCK_REALTIME when Clock was read (ClockRealtime)
	HostTSC  uint64
	_        [4]uint32
}

// ClockData flags.
const (
	ClockTSCStable = 1 << 1
	ClockRealtime  = 1 << 2
	ClockHostTSC   = 1 << 3
)

// PITChannel is struct kvm_pit_channel_state.
type PITChannel struct {
	Count         uint32
	LatchedCount  uint16
	CountLatched  uint8
	StatusLatched uint8
	Status        uint8
	ReadState     uint8
	WriteState    uint8
	WriteLatch    uint8
	RWMode        uint8
	Mode          uint8
	BCD           uint8
	Gate          uint8
	CountLoadTime int64
}

// PITState2 is struct kvm_pit_state2: the in-kernel i8254.
type PITState2 struct {
	Channels [3]PITChannel
	Flags    uint32
	_        [9]uint32
}

// IRQ chips of KVM_GET/SET_IRQCHIP.
const (
	IRQChipPICMaster = 0
	IRQChipPICSlave  = 1
	IRQChipIOAPIC    = 2
)

// IRQChipSize is the size of the chip union of struct kvm_irqchip.
const IRQChipSize = 512

// IRQChip is struct kvm_irqchip: one PIC's (struct kvm_pic_state) or the
// IOAPIC's (struct kvm_ioapic_state) state, kept as the kernel's bytes.
type IRQChip struct {
	ChipID uint32
	_      uint32
	Chip   [IRQChipSize]byte
}

type mpState struct{ State uint32 }

type msrList struct{ N uint32 }

var (
	ioctlGetMSRIndexList = iowr(0x02, sizeOf[msrList]())
	ioctlGetIRQChip      = iowr(0x62, sizeOf[IRQChip]())
	ioctlSetIRQChip      = ior(0x63, sizeOf[IRQChip]()) // _IOR in <linux/kvm.h>, though it writes
	ioctlSetClock        = iow(0x7b, sizeOf[ClockData]())
	ioctlGetClock        = ior(0x7c, sizeOf[ClockData]())
	ioctlGetCPUID2       = iowr(0x91, 8)
	ioctlSetMPState      = iow(0x99, sizeOf[mpState]())
	ioctlGetPIT2         = ior(0x9f, sizeOf[PITState2]())
	ioctlSetPIT2         = iow(0xa0, sizeOf[PITState2]())
	ioctlGetVCPUEvents   = ior(0x9f, sizeOf[VCPUEvents]())
	ioctlSetVCPUEvents   = iow(0xa0, sizeOf[VCPUEvents]())
	ioctlGetDebugRegs    = ior(0xa1, sizeOf[DebugRegs]())
	ioctlSetDebugRegs    = iow(0xa2, sizeOf[DebugRegs]())
	ioctlSetTSCKHz       = ion(0xa2)
	ioctlGetTSCKHz       = ion(0xa3)
	ioctlGetXSAVE        = ior(0xa4, XSAVESize)
	ioctlSetXSAVE        = iow(0xa5, XSAVESize)
	ioctlKVMClockCtrl    = ion(0xad)
	ioctlGetXSAVE2       = ior(0xcf, XSAVESize)
)

// Capabilities the state ioctls depend on.
const (
	CapMPState     = 14
	CapAdjustClock = 39
	CapVCPUEvents  = 41
	CapDebugRegs   = 50
	CapXSAVE       = 55
	CapGetTSCKHz   = 61
	CapKVMClockCtl = 76
	CapXSAVE2      = 208
)

// maxMSRIndexes bounds KVM_GET_MSR_INDEX_LIST's answer; kernels list a few
// hundred.
const maxMSRIndexes = 1 << 14

// MSRIndexList returns the MSRs KVM can save and restore for a guest
// (KVM_GET_MSR_INDEX_LIST: msrs_to_save and emulated_msrs).
func (s *System) MSRIndexList() ([]uint32, error) {
	var probe msrList
	_, err := ioctl(s.fd, "KVM_GET_MSR_INDEX_LIST", ioctlGetMSRIndexList, ptr(&probe))
	if err != nil && !errors.Is(err, unix.E2BIG) {
		return nil, err
	}
	n := probe.N
	for range 4 { // the list does not change, but a retry costs nothing
		if n > maxMSRIndexes {
			return nil, fmt.Errorf("KVM_GET_MSR_INDEX_LIST: %d MSRs, more than %d", n, maxMSRIndexes)
		}
		buf := make([]uint32, 1+n)
		buf[0] = n
		_, err := ioctl(s.fd, "KVM_GET_MSR_INDEX_LIST", ioctlGetMSRIndexList, uintptr(unsafe.Pointer(&buf[0])))
		if errors.Is(err, unix.E2BIG) {
			n = buf[0]
			continue
		}
		if err != nil {
			return nil, err
		}
		return append([]uint32(nil), buf[1:1+min(buf[0], n)]...), nil
	}
	return nil, errors.New("KVM_GET_MSR_INDEX_LIST: the list kept growing")
}

// CheckExtension returns KVM_CHECK_EXTENSION's answer for cap on this VM
// (0: absent). Some answers, such as CapXSAVE2's size, are per VM.
func (vm *VM) CheckExtension(cap int) int {
	r, err := ioctl(vm.fd, "KVM_CHECK_EXTENSION", ioctlCheckExtension, uintptr(cap))
	if err != nil {
		return 0
	}
	return int(r)
}

// XSAVEBufferSize is how many bytes a vCPU's XSAVE state takes on this VM:
// KVM_CAP_XSAVE2's size where KVM has it, never less than XSAVESize.
func (vm *VM) XSAVEBufferSize() int {
	return max(XSAVESize, vm.CheckExtension(CapXSAVE2))
}

// IRQChip returns the state of one in-kernel interrupt controller
// (IRQChipPICMaster, IRQChipPICSlave or IRQChipIOAPIC).
func (vm *VM) IRQChip(id uint32) (IRQChip, error) {
	c := IRQChip{ChipID: id}
	_, err := ioctl(vm.fd, fmt.Sprintf("KVM_GET_IRQCHIP(%d)", id), ioctlGetIRQChip, ptr(&c))
	return c, err
}

// SetIRQChip restores one interrupt controller; c.ChipID says which.
func (vm *VM) SetIRQChip(c IRQChip) error {
	_, err := ioctl(vm.fd, fmt.Sprintf("KVM_SET_IRQCHIP(%d)", c.ChipID), ioctlSetIRQChip, ptr(&c))
	return err
}

// PIT2 returns the in-kernel PIT's state.
func (vm *VM) PIT2() (PITState2, error) {
	var s PITState2
	_, err := ioctl(vm.fd, "KVM_GET_PIT2", ioctlGetPIT2, ptr(&s))
	return s, err
}

// SetPIT2 restores the in-kernel PIT.
func (vm *VM) SetPIT2(s PITState2) error {
	_, err := ioctl(vm.fd, "KVM_SET_PIT2", ioctlSetPIT2, ptr(&s))
	return err
}

// Clock returns the VM's kvmclock.
func (vm *VM) Clock() (ClockData, error) {
	var c ClockData
	_, err := ioctl(vm.fd, "KVM_GET_CLOCK", ioctlGetClock, ptr(&c))
	return c, err
}

// SetClock sets the VM's kvmclock. With ClockRealtime in Flags, KVM moves
// the clock on by the host time passed since Realtime.
func (vm *VM) SetClock(c ClockData) error {
	_, err := ioctl(vm.fd, "KVM_SET_CLOCK", ioctlSetClock, ptr(&c))
	return err
}

// CPUID returns the CPUID leaves set on the vCPU (KVM_GET_CPUID2), with
// KVM's run-time updates (OSXSAVE, leaf 0xd's sizes).
func (c *VCPU) CPUID() ([]CPUIDEntry, error) {
	es := int(unsafe.Sizeof(CPUIDEntry{}))
	for n := 64; n <= 4096; n *= 2 {
		buf := make([]byte, 8+n*es)
		binary.LittleEndian.PutUint32(buf, uint32(n))
		_, err := ioctl(c.fd, "KVM_GET_CPUID2", ioctlGetCPUID2, uintptr(unsafe.Pointer(&buf[0])))
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("vcpu %d: %w", c.ID, err)
		}
		got := min(int(binary.LittleEndian.Uint32(buf)), n)
		out := make([]CPUIDEntry, got)
		for i := range out {
			out[i] = *(*CPUIDEntry)(unsafe.Pointer(&buf[8+i*es]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("vcpu %d: KVM_GET_CPUID2: more than 4096 entries", c.ID)
}

// SetMPState sets the vCPU's multiprocessing state (KVM_SET_MP_STATE).
func (c *VCPU) SetMPState(s uint32) error {
	v := mpState{s}
	return c.get("KVM_SET_MP_STATE", ioctlSetMPState, unsafe.Pointer(&v))
}

// XSAVE returns the vCPU's XSAVE area: size bytes (vm.XSAVEBufferSize),
// through KVM_GET_XSAVE2 when that is more than XSAVESize.
func (c *VCPU) XSAVE(size int) ([]byte, error) {
	size = max(size, XSAVESize)
	buf := make([]byte, size)
	name, req := "KVM_GET_XSAVE", ioctlGetXSAVE
	if size > XSAVESize {
		name, req = "KVM_GET_XSAVE2", ioctlGetXSAVE2
	}
	return buf, c.get(name, req, unsafe.Pointer(&buf[0]))
}

// SetXSAVE restores the vCPU's XSAVE area. KVM reads size bytes
// (vm.XSAVEBufferSize); an area saved smaller is padded with zeros, which
// XSTATE_BV marks as components in their initial state.
func (c *VCPU) SetXSAVE(area []byte, size int) error {
	size = max(size, XSAVESize, len(area))
	buf := make([]byte, size)
	copy(buf, area)
	return c.get("KVM_SET_XSAVE", ioctlSetXSAVE, unsafe.Pointer(&buf[0]))
}

// VCPUEvents returns the vCPU's pending events.
func (c *VCPU) VCPUEvents() (VCPUEvents, error) {
	var e VCPUEvents
	return e, c.get("KVM_GET_VCPU_EVENTS", ioctlGetVCPUEvents, unsafe.Pointer(&e))
}

// SetVCPUEvents restores the vCPU's pending events.
func (c *VCPU) SetVCPUEvents(e VCPUEvents) error {
	return c.get("KVM_SET_VCPU_EVENTS", ioctlSetVCPUEvents, unsafe.Pointer(&e))
}

// DebugRegs returns the vCPU's debug registers.
func (c *VCPU) DebugRegs() (DebugRegs, error) {
	var d DebugRegs
	return d, c.get("KVM_GET_DEBUGREGS", ioctlGetDebugRegs, unsafe.Pointer(&d))
}

// SetDebugRegs restores the vCPU's debug registers.
func (c *VCPU) SetDebugRegs(d DebugRegs) error {
	return c.get("KVM_SET_DEBUGREGS", ioctlSetDebugRegs, unsafe.Pointer(&d))
}

// TSCKHz returns the vCPU's TSC frequency in kHz.
func (c *VCPU) TSCKHz() (uint32, error) {
	r, err := ioctl(c.fd, "KVM_GET_TSC_KHZ", ioctlGetTSCKHz, 0)
	if err != nil {
		return 0, fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	return uint32(r), nil
}

// SetTSCKHz scales the vCPU's TSC to khz (KVM_CAP_TSC_CONTROL).
func (c *VCPU) SetTSCKHz(khz uint32) error {
	_, err := ioctl(c.fd, "KVM_SET_TSC_KHZ", ioctlSetTSCKHz, uintptr(khz))
	if err != nil {
		return fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	return nil
}

// KVMClockCtrl tells a guest using kvmclock that its vCPU was paused, so its
// soft-lockup watchdog does not count the pause (KVM_KVMCLOCK_CTRL). It
// fails with EINVAL when the guest has not set kvmclock up.
func (c *VCPU) KVMClockCtrl() error {
	_, err := ioctl(c.fd, "KVM_KVMCLOCK_CTRL", ioctlKVMClockCtrl, 0)
	if err != nil {
		return fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	return nil
}
