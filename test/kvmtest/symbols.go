package kvmtest

import (
	"debug/elf"
	"fmt"
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
		}
		fmt.Fprintf(&b, "vcpu %s: rip %s = %s\n", m[1], m[2], where)
	}
	return b.String()
}
