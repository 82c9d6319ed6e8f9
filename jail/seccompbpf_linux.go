package jail

import (
	"fmt"
	"maps"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The filter is assembled here, not by elastic/go-seccomp-bpf's Policy:
// that library checks an argument condition by loading the argument into
// the accumulator, and when the condition fails it goes on to compare the
// next system call numbers against the accumulator — the argument, no
// longer the number. Under its policy an ioctl whose request happened to
// be 2 or 257 (open's and openat's numbers) got their EACCES instead of
// death, one equal to 435 (clone3's) got ENOSYS, and an ioctl whose
// request equalled a later conditional call's number was judged by that
// call's conditions on its own arguments: ioctl(1, 41) passed as if it
// were socket(AF_UNIX). TestSeccompIoctlRuleExhaustive found it.
//
// This program reloads nothing because it never needs to: every system
// call number is compared while the accumulator holds it, and a call with
// an argument rule jumps to a block of its own that ends in a verdict
// (allow or kill) on every path. Every verdict is a return right after its
// comparison, so no conditional jump goes further than one instruction
// (classic BPF's conditional jumps reach 255 at most); blocks are reached
// by unconditional jumps, which reach anywhere.

// argRule allows a system call when one argument matches: equals one of
// equal (all 64 bits), or, when equal is empty, has any bit of bitsSet in
// its low half.
type argRule struct {
	nr      int
	arg     int
	equal   []uint64
	bitsSet uint32
}

// filterSpec is what the filter decides: system calls allowed outright,
// answered with an error, or allowed by an argument rule; everything else
// kills the process.
type filterSpec struct {
	allow []int
	errno map[int]unix.Errno
	rules []argRule
}

// Offsets in struct seccomp_data, x86-64 (little-endian: an argument's low
// half comes first).
const (
	dataNR   = 0
	dataArch = 4
	dataArgs = 16
)

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

var (
	bpfLoad  = uint16(unix.BPF_LD | unix.BPF_W | unix.BPF_ABS)
	bpfJEq   = uint16(unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K)
	bpfJGE   = uint16(unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K)
	bpfJSet  = uint16(unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K)
	bpfJA    = uint16(unix.BPF_JMP | unix.BPF_JA)
	bpfRet   = uint16(unix.BPF_RET | unix.BPF_K)
	retKill  = bpfStmt(bpfRet, unix.SECCOMP_RET_KILL_PROCESS)
	retAllow = bpfStmt(bpfRet, unix.SECCOMP_RET_ALLOW)
)

// program assembles the spec for x86-64. It refuses a spec that names a
// system call twice (the second verdict would never be reached), a rule
// on an argument that does not exist, or equal values whose high halves
// differ.
func (s filterSpec) program() ([]unix.SockFilter, error) {
	seen := map[int]bool{}
	for _, nr := range s.allow {
		if seen[nr] {
			return nil, fmt.Errorf("system call %d twice in the filter", nr)
		}
		seen[nr] = true
	}
	for nr := range s.errno {
		if seen[nr] {
			return nil, fmt.Errorf("system call %d twice in the filter", nr)
		}
		seen[nr] = true
	}
	for _, r := range s.rules {
		if seen[r.nr] {
			return nil, fmt.Errorf("system call %d twice in the filter", r.nr)
		}
		seen[r.nr] = true
		if r.arg < 0 || r.arg > 5 {
			return nil, fmt.Errorf("system call %d: no argument %d", r.nr, r.arg)
		}
		for _, v := range r.equal {
			if v>>32 != r.equal[0]>>32 {
				return nil, fmt.Errorf("system call %d: values %#x and %#x differ in their high half", r.nr, r.equal[0], v)
			}
		}
		if len(r.equal) == 0 && r.bitsSet == 0 {
			return nil, fmt.Errorf("system call %d: a rule that allows nothing", r.nr)
		}
	}

	p := []unix.SockFilter{
		bpfStmt(bpfLoad, dataArch),
		bpfJump(bpfJEq, unix.AUDIT_ARCH_X86_64, 1, 0),
		retKill,
		bpfStmt(bpfLoad, dataNR),
		bpfJump(bpfJGE, 0x40000000, 0, 1), // the x32 ABI (__X32_SYSCALL_BIT)
		retKill,
	}
	for _, nr := range s.allow {
		p = append(p, bpfJump(bpfJEq, uint32(nr), 0, 1), retAllow)
	}
	for _, nr := range slices.Sorted(maps.Keys(s.errno)) { // the same program every time
		p = append(p, bpfJump(bpfJEq, uint32(nr), 0, 1), bpfStmt(bpfRet, unix.SECCOMP_RET_ERRNO|uint32(s.errno[nr])&unix.SECCOMP_RET_DATA))
	}
	jumps := make([]int, len(s.rules)) // index of each rule's ja, patched below
	for i, r := range s.rules {
		p = append(p, bpfJump(bpfJEq, uint32(r.nr), 0, 1), bpfStmt(bpfJA, 0))
		jumps[i] = len(p) - 1
	}
	p = append(p, retKill)
	for i, r := range s.rules {
		p[jumps[i]].K = uint32(len(p) - jumps[i] - 1)
		lo := uint32(dataArgs + 8*r.arg)
		if len(r.equal) == 0 {
			p = append(p, bpfStmt(bpfLoad, lo), bpfJump(bpfJSet, r.bitsSet, 0, 1), retAllow, retKill)
			continue
		}
		p = append(p,
			bpfStmt(bpfLoad, lo+4),
			bpfJump(bpfJEq, uint32(r.equal[0]>>32), 1, 0),
			retKill,
			bpfStmt(bpfLoad, lo))
		for _, v := range r.equal {
			p = append(p, bpfJump(bpfJEq, uint32(v), 0, 1), retAllow)
		}
		p = append(p, retKill)
	}
	if len(p) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("the filter has %d instructions, more than the kernel's %d", len(p), unix.BPF_MAXINSNS)
	}
	return p, nil
}

// load sets no_new_privs and installs prog on every thread of the process
// (SECCOMP_FILTER_FLAG_TSYNC, which also sets no_new_privs on each). The
// two calls happen on one locked thread: no_new_privs is per thread, and
// the kernel wants it on the thread that installs the filter.
func load(prog []unix.SockFilter) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return e
	}
	if r != 0 {
		return fmt.Errorf("thread %d could not take the filter (TSYNC)", r)
	}
	return nil
}
