package vmm

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/kvm"
)

var updateGolden = flag.Bool("update", false, "rewrite the *.guest files of testdata/cpuid")

// readCPUIDDump reads a KVM_GET_SUPPORTED_CPUID dump of testdata/cpuid
// (see its README for the format).
func readCPUIDDump(t *testing.T, path string) []kvm.CPUIDEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []kvm.CPUIDEntry
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 7 {
			t.Fatalf("%s:%d: %d fields, want 7", path, line, len(fields))
		}
		var v [7]uint32
		for i, s := range fields {
			n, err := strconv.ParseUint(s, 0, 32)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
			v[i] = uint32(n)
		}
		out = append(out, kvm.CPUIDEntry{Function: v[0], Index: v[1], Flags: v[2], EAX: v[3], EBX: v[4], ECX: v[5], EDX: v[6]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func formatCPUID(entries []kvm.CPUIDEntry) string {
	var b strings.Builder
	b.WriteString("# guestCPUID of the .supported dump beside it: vCPU 0 of 2, TSC-deadline on, XCR0 from guestXSAVEMask.\n")
	b.WriteString("# fn        idx  flags eax        ebx        ecx        edx\n")
	for _, e := range entries {
		fmt.Fprintf(&b, "0x%08x  %#x  %#x   0x%08x 0x%08x 0x%08x 0x%08x\n", e.Function, e.Index, e.Flags, e.EAX, e.EBX, e.ECX, e.EDX)
	}
	return b.String()
}

// TestGuestCPUIDRecordedHosts runs the normalisation over an Intel and an
// AMD host's supported CPUID, both offering nested virtualisation: the
// guest sees no VMX, SMX, SVM or SKINIT and an empty SVM leaf, and
// everything else is what the golden file says (written by the
// normalisation before nesting was hidden: its diff is the change).
func TestGuestCPUIDRecordedHosts(t *testing.T) {
	for _, host := range []string{"intel-icx", "amd-milan"} {
		t.Run(host, func(t *testing.T) {
			supported := readCPUIDDump(t, filepath.Join("testdata", "cpuid", host+".supported"))
			got := guestCPUID(supported, 0, 2, cpuFeatures{tscDeadline: true, xcr0: guestXSAVEMask(supported)})
			checkNoNesting(t, got)
			golden := filepath.Join("testdata", "cpuid", host+".guest")
			text := formatCPUID(got)
			if *updateGolden {
				if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if text != string(want) {
				t.Errorf("guestCPUID differs from %s (rerun with -update and read the diff):\n%s", golden, text)
			}
		})
	}
}

func checkNoNesting(t *testing.T, got []kvm.CPUIDEntry) {
	t.Helper()
	seen := map[uint32]bool{}
	for _, e := range got {
		seen[e.Function] = true
		switch e.Function {
		case 1:
			if e.ECX&(cpuid1ECXVMX|cpuid1ECXSMX) != 0 {
				t.Errorf("leaf 1 ECX %#x offers VMX or SMX", e.ECX)
			}
		case 0x80000001:
			if e.ECX&(cpuidExt1ECXSVM|cpuidExt1ECXSKINIT) != 0 {
				t.Errorf("leaf 0x80000001 ECX %#x offers SVM or SKINIT", e.ECX)
			}
		case cpuidLeafSVM:
			if e.EAX|e.EBX|e.ECX|e.EDX != 0 {
				t.Errorf("leaf 0x8000000a %+v: SVM features offered", e)
			}
		}
	}
	if !seen[1] || !seen[0x80000001] {
		t.Error("leaf 1 or 0x80000001 missing from the guest's CPUID")
	}
}

// TestRestoredCPUIDHidesNesting: a state file whose CPUID offers VMX and
// SVM (a snapshot from an older VMM, or one a compromised VMM wrote) is
// restored without them, and nothing else changes.
func TestRestoredCPUIDHidesNesting(t *testing.T) {
	for _, host := range []string{"intel-icx", "amd-milan"} {
		saved := readCPUIDDump(t, filepath.Join("testdata", "cpuid", host+".supported"))
		before := slices.Clone(saved)
		got := withoutNesting(saved)
		checkNoNesting(t, got)
		if !slices.Equal(saved, before) {
			t.Errorf("%s: withoutNesting changed its input", host)
		}
		for i := range got {
			want := before[i]
			switch want.Function {
			case 1:
				want.ECX &^= cpuid1ECXVMX | cpuid1ECXSMX
			case 0x80000001:
				want.ECX &^= cpuidExt1ECXSVM | cpuidExt1ECXSKINIT
			case cpuidLeafSVM:
				want.EAX, want.EBX, want.ECX, want.EDX = 0, 0, 0, 0
			}
			if got[i] != want {
				t.Errorf("%s: entry %d = %+v, want %+v", host, i, got[i], want)
			}
		}
	}
}
