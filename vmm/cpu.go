package vmm

import (
	"fmt"
	"slices"

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

// The CPU model a guest sees is the host's supported CPUID
// (KVM_GET_SUPPORTED_CPUID), normalized here so that the guest sees a CPU
// that is consistent with itself, that gives it no performance counters,
// and that hides state a sandbox has no use for:
//
//   - Identity: the hypervisor bit; each vCPU's APIC ID (leaves 1, 0xb,
//     0x1f, 0x8000001e); HTT with more than one vCPU.
//   - Timer: the TSC-deadline timer when KVM emulates it (see cpuFeatures).
//   - No PMU: leaf 0xa (architectural perfmon) and 0x23 zeroed; PDCM, DS,
//     DTES64 and DS-CPL cleared in leaf 1; AMD's PerfCtrExtCore, ...NB and
//     ...LLC cleared in 0x80000001 and 0x80000022 (PerfMonV2) zeroed; and
//     KVM's virtual PMU itself turned off (KVM_CAP_PMU_CAPABILITY) where KVM
//     can, so the counter MSRs fault instead of counting. Counters are a
//     side channel between tenants, and the guest's PMU probe is where the
//     nested rig's boots were seen to hang.
//   - XSAVE: only the x87, SSE, AVX and AVX-512 components; no PKRU
//     (protection keys, PKU and OSPKE, hidden), no MPX, no AMX, no
//     processor trace, no CET and no supervisor (IA32_XSS) components.
//     Leaf 0xd lists exactly those components, and XCR0 is preset to them
//     (KVM_SET_XCRS), which is what the guest's kernel will set: KVM sizes
//     leaf 0xd's EBX from XCR0 and updates it when the guest writes XCR0 —
//     but only where it sees that write. Under the rig's emulated AMD-V it
//     does not (TCG does not intercept XSETBV), and the guest found EBX
//     still sized for XCR0=1 ("XSAVE consistency problem: size 2696 !=
//     kernel_size 576"), turned XSAVE off with AVX state already on, and
//     later triple-faulted.
//   - No nested virtualisation: VMX and SMX (leaf 1) and SVM and SKINIT
//     (0x80000001) cleared, and AMD's SVM leaf 0x8000000A zeroed — what
//     Firecracker's CPU templates clear. A guest offered VMX or SVM can
//     run its own hypervisor on KVM's nested code, the part of the host
//     kernel with the worst record of guest-to-host escapes; no sandbox
//     needs it. KVM offers them only where its module has nested=1, but a
//     VMM should not depend on a host's module options for a wall. The
//     same rule is applied to a snapshot's saved CPUID when it is
//     restored (restoreVCPU): the state file is written by a VMM, and a
//     compromised one must not be able to hand the next VMM a guest with
//     nesting on.
//
// The MSRs the VMM sets are bootMSRs; every other MSR is KVM's default.

// CPUID bits the VMM sets or clears.
const (
	cpuid1ECXDTES64      = 1 << 2
	cpuid1ECXDSCPL       = 1 << 4
	cpuid1ECXVMX         = 1 << 5
	cpuid1ECXSMX         = 1 << 6
	cpuid1ECXPDCM        = 1 << 15
	cpuid1ECXTSCDeadline = 1 << 24
	cpuid1ECXXSAVE       = 1 << 26
	cpuid1ECXAVX         = 1 << 28
	cpuid1ECXHypervisor  = 1 << 31
	cpuid1EDXDS          = 1 << 21

	cpuid7EBXMPX     = 1 << 14
	cpuid7EBXAVX512F = 1 << 16
	cpuid7EBXPT      = 1 << 25
	cpuid7ECXPKU     = 1 << 3
	cpuid7ECXOSPKE   = 1 << 4
	cpuid7ECXCETSS   = 1 << 7
	cpuid7EDXAMXBF16 = 1 << 22
	cpuid7EDXCETIBT  = 1 << 20
	cpuid7EDXAMXTILE = 1 << 24
	cpuid7EDXAMXINT8 = 1 << 25

	cpuidExt1ECXSVM         = 1 << 2
	cpuidExt1ECXSKINIT      = 1 << 12
	cpuidExt1ECXPerfCtrCore = 1 << 23
	cpuidExt1ECXPerfCtrNB   = 1 << 24
	cpuidExt1ECXPerfCtrLLC  = 1 << 28
)

// XSAVE state components (bits of XCR0 and of leaf 0xd).
const (
	xfeatureX87     = 1 << 0
	xfeatureSSE     = 1 << 1
	xfeatureYMM     = 1 << 2
	xfeatureOpmask  = 1 << 5
	xfeatureZMMHi   = 1 << 6
	xfeatureHi16ZMM = 1 << 7
	xfeatureAVX512  = xfeatureOpmask | xfeatureZMMHi | xfeatureHi16ZMM

	// fxsaveAreaSize is the legacy region plus the XSAVE header: the size
	// of an XSAVE area with x87 and SSE state only.
	fxsaveAreaSize = 512 + 64
)

// cpuFeatures are what the VMM decided once per machine from what KVM can
// do: features KVM emulates but leaves out of KVM_GET_SUPPORTED_CPUID, and
// the XSAVE components the guest gets.
type cpuFeatures struct {
	// tscDeadline: the in-kernel LAPIC's TSC-deadline timer
	// (KVM_CAP_TSC_DEADLINE_TIMER). With it (and ARAT, which KVM reports),
	// Linux neither calibrates the LAPIC timer against the PIT nor keeps the
	// PIT as a clock event, so the guest's timer interrupts come from one
	// source that is programmed, not periodic. Without it a slow or nested
	// host can fail the calibration and leave the guest ticking on the PIT.
	tscDeadline bool
	// xcr0 is the XSAVE components offered (guestXSAVEMask), and XCR0's
	// preset value; 0 when the guest gets no XSAVE or KVM cannot set XCRs.
	xcr0 uint64
}

func findLeaf(entries []kvm.CPUIDEntry, fn, index uint32) (kvm.CPUIDEntry, bool) {
	for _, e := range entries {
		if e.Function == fn && (e.Index == index || e.Flags&kvm.CPUIDFlagSignificantIndex == 0) {
			return e, true
		}
	}
	return kvm.CPUIDEntry{}, false
}

// guestXSAVEMask is the set of XSAVE components the guest is offered: x87
// and SSE always, AVX's upper halves when AVX is offered, the three AVX-512
// components together when AVX-512F is offered; each only if the host's
// leaf 0xd has it. It is exactly the set the guest's kernel enables (Linux
// keeps a component only when its CPUID feature is present), so it is also
// XCR0's preset. 0 when the host offers no XSAVE.
func guestXSAVEMask(supported []kvm.CPUIDEntry) uint64 {
	l1, ok1 := findLeaf(supported, 1, 0)
	d0, okd := findLeaf(supported, 0xd, 0)
	if !ok1 || !okd || l1.ECX&cpuid1ECXXSAVE == 0 {
		return 0
	}
	host := uint64(d0.EAX)
	mask := host & (xfeatureX87 | xfeatureSSE)
	if mask != xfeatureX87|xfeatureSSE {
		return 0
	}
	if l1.ECX&cpuid1ECXAVX != 0 && host&xfeatureYMM != 0 {
		mask |= xfeatureYMM
		if l7, ok := findLeaf(supported, 7, 0); ok && l7.EBX&cpuid7EBXAVX512F != 0 && host&xfeatureAVX512 == xfeatureAVX512 {
			mask |= xfeatureAVX512
		}
	}
	return mask
}

// xsaveSize is the size of a standard-format XSAVE area holding the
// components in mask, from the host's leaf 0xd sub-leaves (offset and size
// of each component).
func xsaveSize(supported []kvm.CPUIDEntry, mask uint64) uint32 {
	size := uint32(fxsaveAreaSize)
	for _, e := range supported {
		if e.Function == 0xd && e.Index >= 2 && e.Index < 64 && mask&(1<<e.Index) != 0 {
			size = max(size, e.EBX+e.EAX)
		}
	}
	return size
}

// cpuidLeafSVM is AMD's SVM leaf: revision, ASID count and the nested
// features (nested paging, VMCB clean bits, AVIC, ...).
const cpuidLeafSVM = 0x8000000a

// hideNesting is the CPU model's no-nesting rule on one entry.
func hideNesting(e *kvm.CPUIDEntry) {
	switch e.Function {
	case 1:
		e.ECX &^= cpuid1ECXVMX | cpuid1ECXSMX
	case 0x80000001:
		e.ECX &^= cpuidExt1ECXSVM | cpuidExt1ECXSKINIT
	case cpuidLeafSVM:
		e.EAX, e.EBX, e.ECX, e.EDX = 0, 0, 0, 0
	}
}

// withoutNesting is entries with hideNesting applied, in a new slice.
func withoutNesting(entries []kvm.CPUIDEntry) []kvm.CPUIDEntry {
	out := slices.Clone(entries)
	for i := range out {
		hideNesting(&out[i])
	}
	return out
}

// guestCPUID adapts the host-supported CPUID for vCPU id of n, as the CPU
// model above says, with the features in f.
func guestCPUID(supported []kvm.CPUIDEntry, id, n int, f cpuFeatures) []kvm.CPUIDEntry {
	out := make([]kvm.CPUIDEntry, 0, len(supported))
	for _, e := range supported {
		switch e.Function {
		case 1:
			e.ECX |= cpuid1ECXHypervisor
			if f.tscDeadline {
				e.ECX |= cpuid1ECXTSCDeadline
			}
			e.ECX &^= cpuid1ECXPDCM | cpuid1ECXDTES64 | cpuid1ECXDSCPL
			e.EDX &^= cpuid1EDXDS
			if f.xcr0 == 0 {
				e.ECX &^= cpuid1ECXXSAVE | cpuid1ECXAVX
			}
			e.EBX = e.EBX&0x0000ffff | uint32(id)<<24 | uint32(n)<<16
			if n > 1 {
				e.EDX |= 1 << 28 // HTT: several logical processors
			}
		case 7:
			if e.Index == 0 {
				e.EBX &^= cpuid7EBXMPX | cpuid7EBXPT
				e.ECX &^= cpuid7ECXPKU | cpuid7ECXOSPKE | cpuid7ECXCETSS
				e.EDX &^= cpuid7EDXAMXBF16 | cpuid7EDXAMXTILE | cpuid7EDXAMXINT8 | cpuid7EDXCETIBT
			}
		case 0xa, 0x23, 0x80000022:
			e.EAX, e.EBX, e.ECX, e.EDX = 0, 0, 0, 0
		case 0xd:
			switch {
			case f.xcr0 == 0:
				continue
			case e.Index == 0:
				e.EAX, e.EDX = uint32(f.xcr0), uint32(f.xcr0>>32)
				e.ECX = xsaveSize(supported, f.xcr0)
				e.EBX = e.ECX // KVM recomputes it from XCR0
			case e.Index == 1:
				e.ECX, e.EDX = 0, 0 // no supervisor (IA32_XSS) components
			case e.Index >= 64 || f.xcr0&(1<<e.Index) == 0:
				continue
			}
		case 0x14:
			continue // processor trace
		case 0xb, 0x1f:
			e.EDX = uint32(id) // x2APIC ID
		case 0x8000001e:
			e.EAX = uint32(id) // extended APIC ID
		case 0x80000001:
			e.ECX &^= cpuidExt1ECXPerfCtrCore | cpuidExt1ECXPerfCtrNB | cpuidExt1ECXPerfCtrLLC
		}
		hideNesting(&e)
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
	if f.xcr0 != 0 {
		if err := c.SetXCRs([]kvm.XCR{{Index: 0, Value: f.xcr0}}); err != nil {
			return fmt.Errorf("preset XCR0 to %#x: %w", f.xcr0, err)
		}
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
