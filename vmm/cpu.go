package vmm

import (
	"fmt"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/boot"
)

// MSRs set on every vCPU before it runs.
const (
	msrIA32TSC          = 0x10
	msrIA32SysenterCS   = 0x174
	msrIA32SysenterESP  = 0x175
	msrIA32SysenterEIP  = 0x176
	msrIA32MiscEnable   = 0x1a0
	msrMTRRDefType      = 0x2ff
	msrSTAR             = 0xc0000081
	msrLSTAR            = 0xc0000082
	msrCSTAR            = 0xc0000083
	msrSyscallMask      = 0xc0000084
	msrKernelGSBase     = 0xc0000102
	miscEnableFastStr   = 1
	mtrrEnableWriteBack = 1<<11 | 6
)

// Control register and EFER bits.
const (
	cr0PE   = 1 << 0
	cr0ET   = 1 << 4
	cr0PG   = 1 << 31
	cr4PAE  = 1 << 5
	eferLME = 1 << 8
	eferLMA = 1 << 10
)

// CPUID bits the VMM sets itself.
const (
	cpuid1ECXTSCDeadline = 1 << 24
	cpuid1ECXHypervisor  = 1 << 31
)

// cpuFeatures are the features KVM emulates but leaves out of
// KVM_GET_SUPPORTED_CPUID, to be offered only when KVM says it has them.
type cpuFeatures struct {
	// tscDeadline: the in-kernel LAPIC's TSC-deadline timer
	// (KVM_CAP_TSC_DEADLINE_TIMER). With it (and ARAT, which KVM reports),
	// Linux neither calibrates the LAPIC timer against the PIT nor keeps the
	// PIT as a clock event, so the guest's timer interrupts come from one
	// source that is programmed, not periodic. Without it a slow or nested
	// host can fail the calibration and leave the guest ticking on the PIT.
	tscDeadline bool
}

// guestCPUID adapts the host-supported CPUID for vCPU id of n: it says a
// hypervisor is present, gives each vCPU its APIC ID, and adds the features
// in f.
func guestCPUID(supported []kvm.CPUIDEntry, id, n int, f cpuFeatures) []kvm.CPUIDEntry {
	out := make([]kvm.CPUIDEntry, 0, len(supported))
	for _, e := range supported {
		switch e.Function {
		case 1:
			e.ECX |= cpuid1ECXHypervisor
			if f.tscDeadline {
				e.ECX |= cpuid1ECXTSCDeadline
			}
			e.EBX = e.EBX&0x0000ffff | uint32(id)<<24 | uint32(n)<<16
			if n > 1 {
				e.EDX |= 1 << 28 // HTT: several logical processors
			}
		case 0xb, 0x1f:
			e.EDX = uint32(id) // x2APIC ID
		case 0x8000001e:
			e.EAX = uint32(id) // extended APIC ID
		}
		out = append(out, e)
	}
	return out
}

func bootMSRs() []kvm.MSR {
	return []kvm.MSR{
		{Index: msrIA32SysenterCS}, {Index: msrIA32SysenterESP}, {Index: msrIA32SysenterEIP},
		{Index: msrSTAR}, {Index: msrCSTAR}, {Index: msrKernelGSBase}, {Index: msrSyscallMask}, {Index: msrLSTAR},
		{Index: msrIA32TSC},
		{Index: msrIA32MiscEnable, Data: miscEnableFastStr},
		{Index: msrMTRRDefType, Data: mtrrEnableWriteBack},
	}
}

// longModeSregs puts sregs in 64-bit mode with the boot GDT and page tables.
func longModeSregs(s *kvm.Sregs, gdtLimit uint16) {
	code := kvm.Segment{Base: 0, Limit: 0xffffffff, Selector: boot.BootCS, Type: 0xb, Present: 1, S: 1, L: 1, G: 1}
	data := kvm.Segment{Base: 0, Limit: 0xffffffff, Selector: boot.BootDS, Type: 3, Present: 1, S: 1, DB: 1, G: 1}
	tss := kvm.Segment{Base: 0, Limit: 0x67, Selector: boot.BootTR, Type: 0xb, Present: 1}
	s.CS = code
	s.DS, s.ES, s.FS, s.GS, s.SS = data, data, data, data, data
	s.TR = tss
	s.GDT = kvm.DTable{Base: boot.GDTAddr, Limit: gdtLimit}
	s.IDT = kvm.DTable{Base: boot.IDTAddr, Limit: 7}
	s.CR0 = cr0PE | cr0ET | cr0PG
	s.CR3 = boot.PML4Addr
	s.CR4 = cr4PAE
	s.EFER = eferLME | eferLMA
}

// setupVCPU prepares one vCPU. The boot processor gets the 64-bit entry
// state; the others wait in the in-kernel LAPIC for the guest's INIT/SIPI.
func setupVCPU(c *kvm.VCPU, supported []kvm.CPUIDEntry, f cpuFeatures, n int, entry uint64, gdtLimit uint16) error {
	if err := c.SetCPUID(guestCPUID(supported, c.ID, n, f)); err != nil {
		return err
	}
	if err := c.SetMSRs(bootMSRs()); err != nil {
		return err
	}
	lapic, err := c.LAPIC()
	if err != nil {
		return err
	}
	lapic.SetLVTMode(kvm.APICLVTLINT0, kvm.APICModeExtINT)
	lapic.SetLVTMode(kvm.APICLVTLINT1, kvm.APICModeNMI)
	if err := c.SetLAPIC(lapic); err != nil {
		return err
	}
	if err := c.SetFPU(kvm.FPU{FCW: 0x37f, MXCSR: 0x1f80}); err != nil {
		return err
	}
	if c.ID != 0 {
		return nil
	}
	s, err := c.Sregs()
	if err != nil {
		return err
	}
	longModeSregs(&s, gdtLimit)
	if err := c.SetSregs(s); err != nil {
		return err
	}
	if err := c.SetRegs(kvm.Regs{
		RFLAGS: 2,
		RIP:    entry,
		RSP:    boot.StackTop,
		RBP:    boot.StackTop,
		RSI:    boot.ZeroPageAddr,
	}); err != nil {
		return fmt.Errorf("boot vcpu registers: %w", err)
	}
	return nil
}
