package kvm_test

import (
	"bytes"
	"slices"
	"testing"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// stateVM is a VM with the in-kernel irqchip and PIT and one vCPU whose
// CPUID is KVM's supported set: what the state ioctls need.
func stateVM(t *testing.T) (*kvm.System, *kvm.VM, *kvm.VCPU) {
	t.Helper()
	kvmtest.Require(t)
	sys, err := kvm.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sys.Close() })
	vm, err := sys.CreateVM()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	if err := vm.CreateIRQChip(); err != nil {
		t.Fatal(err)
	}
	if err := vm.CreatePIT2(); err != nil {
		t.Fatal(err)
	}
	c, err := vm.CreateVCPU(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cpuid, err := sys.SupportedCPUID()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetCPUID(cpuid); err != nil {
		t.Fatal(err)
	}
	return sys, vm, c
}

// TestVCPUStateRoundTrip sets a value through each vCPU state ioctl and
// reads it back: a layout or direction mistake shows up as an error or as a
// value that does not come back.
func TestVCPUStateRoundTrip(t *testing.T) {
	_, vm, c := stateVM(t)

	d, err := c.DebugRegs()
	if err != nil {
		t.Fatal(err)
	}
	d.DB[1] = 0x1234000
	if err := c.SetDebugRegs(d); err != nil {
		t.Fatal(err)
	}
	if got, err := c.DebugRegs(); err != nil || got.DB[1] != 0x1234000 {
		t.Errorf("debug regs back: %+v, %v", got, err)
	}

	e, err := c.VCPUEvents()
	if err != nil {
		t.Fatal(err)
	}
	e.NMI.Masked = 1
	if err := c.SetVCPUEvents(e); err != nil {
		t.Fatal(err)
	}
	if got, err := c.VCPUEvents(); err != nil || got.NMI.Masked != 1 {
		t.Errorf("vcpu events back: %+v, %v", got, err)
	}

	size := vm.XSAVEBufferSize()
	x, err := c.XSAVE(size)
	if err != nil || len(x) != size || size < kvm.XSAVESize {
		t.Fatalf("XSAVE: %d bytes (want %d), %v", len(x), size, err)
	}
	x[24], x[25] = 0x80, 0x9f // MXCSR (legacy region) 0x9f80: the default with flush-to-zero
	x[512] |= 1 << 1          // XSTATE_BV's SSE bit: KVM loads MXCSR only with it (or AVX's)
	if err := c.SetXSAVE(x, size); err != nil {
		t.Fatal(err)
	}
	if got, err := c.XSAVE(size); err != nil || !bytes.Equal(got[24:26], x[24:26]) {
		t.Errorf("XSAVE back: mxcsr bytes %x, %v", got[24:26], err)
	}

	if err := c.SetMPState(kvm.MPStateHalted); err != nil {
		t.Fatal(err)
	}
	if got, err := c.MPState(); err != nil || got != kvm.MPStateHalted {
		t.Errorf("MP state back: %d, %v", got, err)
	}

	cpuid, err := c.CPUID()
	if err != nil || len(cpuid) == 0 {
		t.Fatalf("KVM_GET_CPUID2: %d entries, %v", len(cpuid), err)
	}
	if !slices.ContainsFunc(cpuid, func(e kvm.CPUIDEntry) bool { return e.Function == 0 }) {
		t.Errorf("KVM_GET_CPUID2 has no leaf 0")
	}
	if khz, err := c.TSCKHz(); err != nil || khz == 0 {
		t.Errorf("TSC frequency %d kHz, %v", khz, err)
	}
}

func TestVMStateRoundTrip(t *testing.T) {
	sys, vm, _ := stateVM(t)

	for _, id := range []uint32{kvm.IRQChipPICMaster, kvm.IRQChipPICSlave, kvm.IRQChipIOAPIC} {
		chip, err := vm.IRQChip(id)
		if err != nil {
			t.Fatal(err)
		}
		if id == kvm.IRQChipIOAPIC {
			chip.Chip[8] = 0x5 // ioregsel
		} else {
			chip.Chip[2] = 0xa5 // imr
		}
		if err := vm.SetIRQChip(chip); err != nil {
			t.Fatal(err)
		}
		if got, err := vm.IRQChip(id); err != nil || got.Chip != chip.Chip {
			t.Errorf("irqchip %d back differs (%v)", id, err)
		}
	}

	pit, err := vm.PIT2()
	if err != nil {
		t.Fatal(err)
	}
	pit.Channels[2].Gate = 1
	if err := vm.SetPIT2(pit); err != nil {
		t.Fatal(err)
	}
	if got, err := vm.PIT2(); err != nil || got.Channels[2].Gate != 1 {
		t.Errorf("PIT back: %+v, %v", got.Channels[2], err)
	}

	const ns = 5_000_000_000_000 // 5000 s of guest time
	if err := vm.SetClock(kvm.ClockData{Clock: ns}); err != nil {
		t.Fatal(err)
	}
	if got, err := vm.Clock(); err != nil || got.Clock < ns || got.Clock > ns+60_000_000_000 {
		t.Errorf("kvmclock back: %d, want just after %d (%v)", got.Clock, uint64(ns), err)
	}

	list, err := sys.MSRIndexList()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(list, 0x10) { // IA32_TSC
		t.Errorf("KVM_GET_MSR_INDEX_LIST (%d MSRs) has no IA32_TSC", len(list))
	}
}
