package kvmtest

import (
	"debug/elf"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var ripRe = regexp.MustCompile(`vcpu=(\d+) rip=(0x[0-9a-f]+)`)

// PlaceRIPs finds the "vcpu state" lines a VMM logs on SIGUSR1 in log and
// names the kernel function each vCPU's rip is in, from the ELF vmlinux's
// symbol table: "vcpu 0: rip 0xffffffff81234567 = serial8250_console_write+0x53".
// The guest kernel is built without KASLR, so vmlinux's addresses hold for
// the bzImage too. Empty when there are no such lines.
func PlaceRIPs(vmlinux, log string) string {
	ms := ripRe.FindAllStringSubmatch(log, -1)
	if len(ms) == 0 {
		return ""
	}
	f, err := elf.Open(vmlinux)
	if err != nil {
		return "cannot read " + vmlinux + ": " + err.Error()
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return "no symbols in " + vmlinux + ": " + err.Error()
	}
	var funcs []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			funcs = append(funcs, s)
		}
	}
	sort.Slice(funcs, func(i, j int) bool { return funcs[i].Value < funcs[j].Value })
	var b strings.Builder
	for _, m := range ms {
		rip, err := strconv.ParseUint(m[2], 0, 64)
		if err != nil {
			continue
		}
		i := sort.Search(len(funcs), func(i int) bool { return funcs[i].Value > rip }) - 1
		where := "outside the kernel's functions (user space?)"
		if i >= 0 && (funcs[i].Size == 0 || rip < funcs[i].Value+funcs[i].Size) {
			where = fmt.Sprintf("%s+%#x", funcs[i].Name, rip-funcs[i].Value)
		} else if rip >= moduleSpace {
			// The guest kernel has no modules: an address there is the
			// host's (in the rig, L1's), left in the vCPU by the emulator.
			where = "in module space, which the guest kernel (no modules) does not use"
			if host := hostSymbol(rip); host != "" {
				where += "; on this host it is " + host
			}
		}
		fmt.Fprintf(&b, "vcpu %s: rip %s = %s\n", m[1], m[2], where)
	}
	return b.String()
}

// moduleSpace is where x86-64 Linux maps modules.
const moduleSpace = 0xffffffffa0000000

// hostSymbol names addr from this host's /proc/kallsyms (root only), e.g.
// "svm_vcpu_run+0x1c [kvm_amd]"; "" when it cannot.
func hostSymbol(addr uint64) string {
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		return ""
	}
	var best uint64
	var name string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || (f[1] != "t" && f[1] != "T") {
			continue
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil || a == 0 || a > addr || a < best {
			continue
		}
		best, name = a, f[2]
		if len(f) > 3 {
			name += " " + f[3]
		}
	}
	if name == "" {
		return ""
	}
	return fmt.Sprintf("%s+%#x", name, addr-best)
}
