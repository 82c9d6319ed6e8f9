package vmm

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// The order of the state ioctls matters to KVM (Firecracker documents the
// same constraints):
//
//   - Save: KVM_GET_MP_STATE first, as it may deliver pending LAPIC events
//     and change what the others read; KVM_GET_VCPU_EVENTS last.
//   - Restore: CPUID first (it decides which MSRs, XCR0 bits and XSAVE
//     components are valid); MP state and registers; SREGS before the
//     LAPIC (SREGS sets the APIC base); the LAPIC before the MSRs (the
//     TSC-deadline MSR needs the LAPIC in TSC-deadline mode); IA32_TSC
//     before IA32_TSC_DEADLINE (KVM arms the deadline timer against the
//     TSC); vCPU events after the registers (KVM_SET_REGS clears a pending
//     exception that the events restore).

// MSRs whose values a snapshot keeps, where KVM lists them
// (KVM_GET_MSR_INDEX_LIST): the ones a Linux guest writes and relies on.
// Everything else is KVM's default or derived from CPUID. A mitigation
// MSR left out would come back at KVM's default after a restore: the
// guest believes it turned TSX or store bypass off, and it is on again.
var savedMSRRanges = []struct{ first, last uint32 }{
	{0x10, 0x10},             // IA32_TSC
	{0x11, 0x12},             // kvmclock wall clock and system time (old numbers)
	{0x1b, 0x1b},             // IA32_APIC_BASE
	{0x3a, 0x3b},             // IA32_FEATURE_CONTROL, IA32_TSC_ADJUST
	{0x48, 0x48},             // IA32_SPEC_CTRL
	{0xe1, 0xe1},             // IA32_UMWAIT_CONTROL: the guest's TPAUSE/UMWAIT time limit and C0.2 switch
	{0x10a, 0x10a},           // IA32_ARCH_CAPABILITIES
	{0x122, 0x122},           // IA32_TSX_CTRL: whether the guest turned RTM off (TAA mitigation; Firecracker saves it)
	{0x140, 0x140},           // MISC_FEATURES_ENABLES
	{0x174, 0x176},           // SYSENTER CS, ESP, EIP
	{0x17a, 0x17a},           // IA32_MCG_STATUS
	{0x1a0, 0x1a0},           // IA32_MISC_ENABLE
	{0x1d9, 0x1d9},           // IA32_DEBUGCTL
	{0x200, 0x2ff},           // MTRRs and IA32_PAT (0x277)
	{0x6e0, 0x6e0},           // IA32_TSC_DEADLINE
	{0xda0, 0xda0},           // IA32_XSS
	{0xc0000080, 0xc0000084}, // EFER, STAR, LSTAR, CSTAR, SYSCALL_MASK
	{0xc0000100, 0xc0000103}, // FS_BASE, GS_BASE, KERNEL_GS_BASE, TSC_AUX
	{0xc0010015, 0xc0010015}, // AMD HWCR
	{0xc001011f, 0xc001011f}, // AMD VIRT_SPEC_CTRL: the guest's SSBD (speculative store bypass) setting
	{0x4b564d00, 0x4b564dff}, // KVM's paravirtual MSRs (kvmclock, steal time, async PF, PV EOI, ...)
}

// msrsAlwaysSaved are read even when KVM_GET_MSR_INDEX_LIST does not list
// them (KVM handles but does not list the MTRRs), because the VMM set them
// at boot.
var msrsAlwaysSaved = []uint32{msrMTRRDefType}

const msrTSCDeadline = 0x6e0

// maxMSRsPerIoctl stays below KVM's MAX_IO_MSRS (256).
const maxMSRsPerIoctl = 128

// savedMSRs is the list of MSRs to read on a save: those KVM lists that a
// snapshot keeps, plus msrsAlwaysSaved.
func savedMSRs(kvmList []uint32) []uint32 {
	var out []uint32
	for _, x := range kvmList {
		for _, r := range savedMSRRanges {
			if x >= r.first && x <= r.last {
				out = append(out, x)
				break
			}
		}
	}
	for _, x := range msrsAlwaysSaved {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// readMSRs reads the MSRs in indexes, leaving out any KVM refuses to read
// for this vCPU (KVM lists MSRs that some CPUID settings disable). It
// returns the ones it left out too.
func readMSRs(c *kvm.VCPU, indexes []uint32) (got []kvm.MSR, refused []uint32, err error) {
	for len(indexes) > 0 {
		chunk := indexes[:min(len(indexes), maxMSRsPerIoctl)]
		out, err := c.MSRs(chunk...)
		if err != nil {
			return nil, nil, err
		}
		got = append(got, out...)
		indexes = indexes[len(out):]
		if len(out) < len(chunk) {
			refused = append(refused, indexes[0])
			indexes = indexes[1:]
		}
	}
	return got, refused, nil
}

// msrList returns (and remembers) the MSRs a save reads.
func (m *Machine) msrList() ([]uint32, error) {
	if m.snap.msrs == nil {
		list, err := m.sys.MSRIndexList()
		if err != nil {
			return nil, err
		}
		m.snap.msrs = savedMSRs(list)
	}
	return m.snap.msrs, nil
}

// saveVCPU reads one vCPU's state, on its own thread, in the order above.
func (m *Machine) saveVCPU(c *kvm.VCPU, msrs []uint32) (snapshot.VCPU, error) {
	st := snapshot.VCPU{ID: c.ID}
	var err error
	if st.MPState, err = c.MPState(); err != nil {
		return st, err
	}
	if st.Regs, err = c.Regs(); err != nil {
		return st, err
	}
	if st.Sregs, err = c.Sregs(); err != nil {
		return st, err
	}
	if st.XSAVE, err = c.XSAVE(m.vm.XSAVEBufferSize()); err != nil {
		return st, err
	}
	if m.sys.CheckExtension(kvm.CapXCRS) != 0 {
		if st.XCRs, err = c.XCRs(); err != nil {
			return st, err
		}
	}
	if st.DebugRegs, err = c.DebugRegs(); err != nil {
		return st, err
	}
	lapic, err := c.LAPIC()
	if err != nil {
		return st, err
	}
	st.LAPIC = lapic.Regs[:]
	if st.CPUID, err = c.CPUID(); err != nil {
		return st, err
	}
	var refused []uint32
	if st.MSRs, refused, err = readMSRs(c, msrs); err != nil {
		return st, err
	}
	logRefusedMSRs(m.log, c.ID, refused)
	fixZeroTSCDeadline(st.MSRs)
	if st.Events, err = c.VCPUEvents(); err != nil {
		return st, err
	}
	return st, nil
}

// logRefusedMSRs warns of the MSRs a save left out, by number: the
// restored guest finds them at KVM's defaults, which for a mitigation
// MSR undoes what the guest set. Saves are the daemon's requests, not the
// guest's, so this is not rate-limited.
func logRefusedMSRs(log *slog.Logger, vcpu int, refused []uint32) {
	if len(refused) == 0 {
		return
	}
	hex := make([]string, len(refused))
	for i, x := range refused {
		hex[i] = fmt.Sprintf("%#x", x)
	}
	log.Warn("snapshot: MSRs KVM lists but would not read are not saved; the restored guest finds them at KVM's defaults",
		"vcpu", vcpu, "msrs", strings.Join(hex, ","))
}

// fixZeroTSCDeadline replaces a zero IA32_TSC_DEADLINE with the saved TSC,
// so the restored vCPU takes a timer interrupt at once and the guest
// re-arms its timer: Firecracker saw a deadline cleared at save time with
// its interrupt never delivered, which left a vCPU without timer
// interrupts after the restore.
func fixZeroTSCDeadline(msrs []kvm.MSR) {
	var tsc uint64
	for _, r := range msrs {
		if r.Index == msrIA32TSC {
			tsc = r.Data
		}
	}
	for i := range msrs {
		if msrs[i].Index == msrTSCDeadline && msrs[i].Data == 0 {
			msrs[i].Data = tsc
		}
	}
}

// restoreVCPU puts one vCPU in state st, in the order above.
func (m *Machine) restoreVCPU(c *kvm.VCPU, st *snapshot.VCPU) error {
	// The saved CPUID, with nesting hidden whatever the state file says
	// (see the CPU model in cpu.go).
	if err := c.SetCPUID(withoutNesting(st.CPUID)); err != nil {
		return err
	}
	if err := c.SetMPState(st.MPState); err != nil {
		return err
	}
	if err := c.SetRegs(st.Regs); err != nil {
		return err
	}
	if err := c.SetSregs(st.Sregs); err != nil {
		return err
	}
	if err := c.SetXSAVE(st.XSAVE, m.vm.XSAVEBufferSize()); err != nil {
		return err
	}
	if len(st.XCRs) > 0 {
		if err := c.SetXCRs(st.XCRs); err != nil {
			return err
		}
	}
	if err := c.SetDebugRegs(st.DebugRegs); err != nil {
		return err
	}
	var lapic kvm.LAPICState
	copy(lapic.Regs[:], st.LAPIC)
	if err := c.SetLAPIC(lapic); err != nil {
		return err
	}
	var msrs, deferred []kvm.MSR
	for _, r := range st.MSRs {
		if r.Index == msrTSCDeadline {
			deferred = append(deferred, r)
		} else {
			msrs = append(msrs, r)
		}
	}
	for _, set := range [][]kvm.MSR{msrs, deferred} {
		for len(set) > 0 {
			chunk := set[:min(len(set), maxMSRsPerIoctl)]
			if err := c.SetMSRs(chunk); err != nil {
				return err
			}
			set = set[len(chunk):]
		}
	}
	if err := c.SetVCPUEvents(st.Events); err != nil {
		return err
	}
	// The guest was stopped since the save; EINVAL when it has no kvmclock.
	c.KVMClockCtrl()
	return nil
}
