package vmm

import (
	"testing"

	"github.com/cellvm/cellvm/kvm"
)

func leaf(entries []kvm.CPUIDEntry, fn uint32) kvm.CPUIDEntry {
	for _, e := range entries {
		if e.Function == fn {
			return e
		}
	}
	return kvm.CPUIDEntry{}
}

func TestGuestCPUIDTSCDeadlineOnlyWhenKVMHasIt(t *testing.T) {
	supported := []kvm.CPUIDEntry{{Function: 1, ECX: 0x1}, {Function: 6, EAX: 0x4}}
	without := leaf(guestCPUID(supported, 0, 1, cpuFeatures{}), 1)
	if without.ECX&cpuid1ECXTSCDeadline != 0 {
		t.Errorf("leaf 1 ECX = %#x: TSC-deadline offered though KVM did not report it", without.ECX)
	}
	with := leaf(guestCPUID(supported, 0, 1, cpuFeatures{tscDeadline: true}), 1)
	if with.ECX&cpuid1ECXTSCDeadline == 0 {
		t.Errorf("leaf 1 ECX = %#x: TSC-deadline missing though KVM has it", with.ECX)
	}
	if with.ECX&0x1 == 0 || with.ECX&cpuid1ECXHypervisor == 0 {
		t.Errorf("leaf 1 ECX = %#x: lost a supported bit or the hypervisor bit", with.ECX)
	}
	if supported[0].ECX != 0x1 {
		t.Errorf("the supported list was modified: leaf 1 ECX = %#x", supported[0].ECX)
	}
}

func TestGuestCPUIDAPICIDs(t *testing.T) {
	supported := []kvm.CPUIDEntry{{Function: 1, EBX: 0xabcd}, {Function: 0xb}, {Function: 0x8000001e}}
	for id := 0; id < 3; id++ {
		got := guestCPUID(supported, id, 3, cpuFeatures{})
		l1 := leaf(got, 1)
		if apic := l1.EBX >> 24; apic != uint32(id) {
			t.Errorf("vcpu %d: leaf 1 APIC ID %d", id, apic)
		}
		if count := l1.EBX >> 16 & 0xff; count != 3 {
			t.Errorf("vcpu %d: leaf 1 logical count %d, want 3", id, count)
		}
		if l1.EBX&0xffff != 0xabcd {
			t.Errorf("vcpu %d: leaf 1 EBX low half %#x changed", id, l1.EBX&0xffff)
		}
		if l1.EDX&(1<<28) == 0 {
			t.Errorf("vcpu %d: HTT not set with 3 vCPUs", id)
		}
		if x2 := leaf(got, 0xb).EDX; x2 != uint32(id) {
			t.Errorf("vcpu %d: x2APIC ID %d", id, x2)
		}
		if ext := leaf(got, 0x8000001e).EAX; ext != uint32(id) {
			t.Errorf("vcpu %d: extended APIC ID %d", id, ext)
		}
	}
}

func leafIdx(entries []kvm.CPUIDEntry, fn, idx uint32) (kvm.CPUIDEntry, bool) {
	for _, e := range entries {
		if e.Function == fn && e.Index == idx {
			return e, true
		}
	}
	return kvm.CPUIDEntry{}, false
}

// hostCPUID is what KVM_GET_SUPPORTED_CPUID gives on a host like the rig's
// L1 (AMD, AVX, PKU, a PMU) plus Intel's perfmon leaf and AVX-512 state,
// so that every normalization has something to remove.
func hostCPUID(avx512 bool) []kvm.CPUIDEntry {
	sig := uint32(kvm.CPUIDFlagSignificantIndex)
	l7 := kvm.CPUIDEntry{Function: 7, Flags: sig, EBX: cpuid7EBXMPX | cpuid7EBXPT | 1<<3 /* BMI1 */, ECX: cpuid7ECXPKU | cpuid7ECXOSPKE | cpuid7ECXCETSS,
		EDX: cpuid7EDXAMXTILE | cpuid7EDXAMXINT8 | cpuid7EDXAMXBF16 | cpuid7EDXCETIBT}
	d0 := kvm.CPUIDEntry{Function: 0xd, Flags: sig, EAX: 0x207 /* x87 SSE YMM PKRU */, EBX: 576, ECX: 2696}
	if avx512 {
		l7.EBX |= cpuid7EBXAVX512F
		d0.EAX |= xfeatureAVX512 | 1<<17 | 1<<18 // and AMX tiles
		d0.ECX = 11008
	}
	out := []kvm.CPUIDEntry{
		{Function: 0, EAX: 0x23},
		{Function: 1, ECX: cpuid1ECXXSAVE | cpuid1ECXAVX | cpuid1ECXPDCM | cpuid1ECXDTES64 | cpuid1ECXDSCPL | 1 /* SSE3 */, EDX: cpuid1EDXDS | 1<<25 /* SSE */},
		l7,
		{Function: 7, Index: 1, Flags: sig, EAX: 1 << 5},
		{Function: 0xa, EAX: 0x07300402, EBX: 0, ECX: 0, EDX: 0x603},
		d0,
		{Function: 0xd, Index: 1, Flags: sig, EAX: 0xf, ECX: 0x1800, EDX: 0},
		{Function: 0xd, Index: 2, Flags: sig, EAX: 256, EBX: 576},
		{Function: 0xd, Index: 9, Flags: sig, EAX: 8, EBX: 2688},
		{Function: 0xd, Index: 11, Flags: sig, EAX: 16, EBX: 0, ECX: 1},
		{Function: 0x14, Flags: sig, EAX: 1},
		{Function: 0x23, Flags: sig, EAX: 3},
		{Function: 0x80000001, ECX: cpuidExt1ECXPerfCtrCore | cpuidExt1ECXPerfCtrNB | cpuidExt1ECXPerfCtrLLC | 1 /* LAHF */},
		{Function: 0x80000022, EAX: 1, EBX: 6},
	}
	if avx512 {
		out = append(out,
			kvm.CPUIDEntry{Function: 0xd, Index: 5, Flags: sig, EAX: 64, EBX: 1088},
			kvm.CPUIDEntry{Function: 0xd, Index: 6, Flags: sig, EAX: 512, EBX: 1152},
			kvm.CPUIDEntry{Function: 0xd, Index: 7, Flags: sig, EAX: 1024, EBX: 1664},
			kvm.CPUIDEntry{Function: 0xd, Index: 17, Flags: sig, EAX: 64, EBX: 2752},
			kvm.CPUIDEntry{Function: 0xd, Index: 18, Flags: sig, EAX: 8192, EBX: 2816})
	}
	return out
}

func TestGuestCPUIDHasNoPMU(t *testing.T) {
	got := guestCPUID(hostCPUID(false), 0, 2, cpuFeatures{})
	for _, fn := range []uint32{0xa, 0x23, 0x80000022} {
		if e, ok := leafIdx(got, fn, 0); ok && (e.EAX|e.EBX|e.ECX|e.EDX) != 0 {
			t.Errorf("leaf %#x = %+v: a PMU is advertised", fn, e)
		}
	}
	l1 := leaf(got, 1)
	if l1.ECX&(cpuid1ECXPDCM|cpuid1ECXDTES64|cpuid1ECXDSCPL) != 0 || l1.EDX&cpuid1EDXDS != 0 {
		t.Errorf("leaf 1 ECX %#x EDX %#x: PDCM, DTES64, DS-CPL or DS left on", l1.ECX, l1.EDX)
	}
	if l1.ECX&1 == 0 || l1.EDX&(1<<25) == 0 {
		t.Errorf("leaf 1 lost unrelated features: ECX %#x EDX %#x", l1.ECX, l1.EDX)
	}
	ext := leaf(got, 0x80000001)
	if ext.ECX&(cpuidExt1ECXPerfCtrCore|cpuidExt1ECXPerfCtrNB|cpuidExt1ECXPerfCtrLLC) != 0 || ext.ECX&1 == 0 {
		t.Errorf("leaf 0x80000001 ECX %#x: AMD's counter extensions left on, or LAHF lost", ext.ECX)
	}
	if _, ok := leafIdx(got, 0x14, 0); ok {
		t.Error("leaf 0x14 (processor trace) offered")
	}
}

func TestGuestXSAVEIsConsistent(t *testing.T) {
	for _, avx512 := range []bool{false, true} {
		host := hostCPUID(avx512)
		mask := guestXSAVEMask(host)
		want := uint64(xfeatureX87 | xfeatureSSE | xfeatureYMM)
		wantSize := uint32(576 + 256)
		if avx512 {
			want |= xfeatureAVX512
			wantSize = 1664 + 1024
		}
		if mask != want {
			t.Errorf("avx512=%v: XSAVE mask %#x, want %#x (no PKRU, no AMX)", avx512, mask, want)
		}
		got := guestCPUID(host, 0, 1, cpuFeatures{xcr0: mask})
		d0, ok := leafIdx(got, 0xd, 0)
		if !ok || uint64(d0.EAX)|uint64(d0.EDX)<<32 != mask {
			t.Fatalf("avx512=%v: leaf 0xd.0 %+v does not list exactly %#x", avx512, d0, mask)
		}
		if d0.ECX != wantSize || d0.EBX != wantSize {
			t.Errorf("avx512=%v: leaf 0xd.0 sizes EBX %d ECX %d, want %d (the listed components' extent)", avx512, d0.EBX, d0.ECX, wantSize)
		}
		// Every component sub-leaf the guest sees is one it may enable, and
		// each one it may enable has its sub-leaf.
		for _, e := range got {
			if e.Function == 0xd && e.Index >= 2 && mask&(1<<e.Index) == 0 {
				t.Errorf("avx512=%v: sub-leaf 0xd.%d offered for a component not in XCR0", avx512, e.Index)
			}
		}
		for i := uint32(2); i < 64; i++ {
			if mask&(1<<i) != 0 {
				if _, ok := leafIdx(got, 0xd, i); !ok {
					t.Errorf("avx512=%v: component %d enabled without its sub-leaf", avx512, i)
				}
			}
		}
		if d1, _ := leafIdx(got, 0xd, 1); d1.ECX != 0 || d1.EDX != 0 || d1.EAX != 0xf {
			t.Errorf("avx512=%v: leaf 0xd.1 %+v: supervisor components offered, or XSAVEOPT/XSAVEC/XSAVES lost", avx512, d1)
		}
		l7, _ := leafIdx(got, 7, 0)
		if l7.ECX&(cpuid7ECXPKU|cpuid7ECXOSPKE|cpuid7ECXCETSS) != 0 || l7.EBX&(cpuid7EBXMPX|cpuid7EBXPT) != 0 ||
			l7.EDX&(cpuid7EDXAMXTILE|cpuid7EDXAMXINT8|cpuid7EDXAMXBF16|cpuid7EDXCETIBT) != 0 {
			t.Errorf("avx512=%v: leaf 7 %+v still offers PKU, MPX, PT, CET or AMX", avx512, l7)
		}
		if l7.EBX&(1<<3) == 0 || (avx512 && l7.EBX&cpuid7EBXAVX512F == 0) {
			t.Errorf("avx512=%v: leaf 7 EBX %#x lost BMI1 or AVX-512F", avx512, l7.EBX)
		}
		if l1 := leaf(got, 1); l1.ECX&(cpuid1ECXXSAVE|cpuid1ECXAVX) != cpuid1ECXXSAVE|cpuid1ECXAVX {
			t.Errorf("avx512=%v: leaf 1 ECX %#x lost XSAVE or AVX", avx512, l1.ECX)
		}
	}
}

func TestGuestWithoutXSAVE(t *testing.T) {
	host := hostCPUID(false)
	if got := guestXSAVEMask(append([]kvm.CPUIDEntry{{Function: 1}}, host[2:]...)); got != 0 {
		t.Errorf("no XSAVE on the host: mask %#x, want 0", got)
	}
	got := guestCPUID(host, 0, 1, cpuFeatures{}) // KVM cannot set XCRs
	if l1 := leaf(got, 1); l1.ECX&(cpuid1ECXXSAVE|cpuid1ECXAVX) != 0 {
		t.Errorf("XSAVE or AVX offered (leaf 1 ECX %#x) though XCR0 cannot be preset", l1.ECX)
	}
	for _, e := range got {
		if e.Function == 0xd {
			t.Errorf("leaf 0xd.%d offered without XSAVE", e.Index)
		}
	}
}
