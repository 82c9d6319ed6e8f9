package jail

import (
	"encoding/binary"
	"slices"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filterVM is the VMM's filter in x/net/bpf's interpreter, which reads
// words big-endian where the kernel reads seccomp_data native-endian:
// seccompData writes each 32-bit word big-endian at its native offset, so
// the program loads the values the kernel would give it.
func filterVM(t *testing.T) *bpf.VM {
	t.Helper()
	s, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.program()
	if err != nil {
		t.Fatal(err)
	}
	prog := make([]bpf.Instruction, len(raw))
	for i, r := range raw {
		prog[i] = bpf.RawInstruction{Op: r.Code, Jt: r.Jt, Jf: r.Jf, K: r.K}.Disassemble()
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// seccompData is struct seccomp_data of an x86-64 system call, laid out
// for filterVM.
func seccompData(nr int, args ...uint64) []byte {
	b := make([]byte, 64)
	be := binary.BigEndian
	be.PutUint32(b[0:], uint32(nr))
	be.PutUint32(b[4:], unix.AUDIT_ARCH_X86_64)
	for i, a := range args {
		be.PutUint32(b[16+8*i:], uint32(a))       // low half first on little-endian
		be.PutUint32(b[16+8*i+4:], uint32(a>>32)) // then the high half
	}
	return b
}

// Verdicts, as the filter returns them.
const (
	verdictKill   = unix.SECCOMP_RET_KILL_PROCESS
	verdictAllow  = unix.SECCOMP_RET_ALLOW
	verdictENOSYS = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
	verdictEACCES = unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES)
)

func verdict(t *testing.T, vm *bpf.VM, data []byte) uint32 {
	t.Helper()
	r, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(r)
}

// TestSeccompIoctlRuleExhaustive runs the assembled filter over every
// ioctl request a type byte and a number make (all 65536, no direction or
// size), over every allowed request with its type byte replaced and with
// each of its 64 bits flipped: only the exact allowed numbers pass. The
// children of TestSeccompIoctls show the kernel kills what this says is
// killed; this shows it for every type, which children could not afford.
func TestSeccompIoctlRuleExhaustive(t *testing.T) {
	vm := filterVM(t)
	allowed, err := AllowedIoctls()
	if err != nil {
		t.Fatal(err)
	}
	check := func(req uint64) {
		want := uint32(verdictKill)
		if slices.Contains(allowed, req) {
			want = verdictAllow
		}
		if got := verdict(t, vm, seccompData(unix.SYS_IOCTL, 3, req)); got != want {
			t.Errorf("ioctl %#x: verdict %#x, want %#x", req, got, want)
		}
	}
	for req := uint64(0); req < 1<<16; req++ {
		check(req)
	}
	for _, a := range allowed {
		for typ := uint64(0); typ < 256; typ++ {
			check(a&^0xff00 | typ<<8)
		}
		for bit := range 64 {
			check(a ^ 1<<bit)
		}
		check(a) // and the request itself passes
	}
	// Another architecture's read (i386's number 3 is read too) dies.
	i386 := seccompData(3)
	binary.BigEndian.PutUint32(i386[4:], unix.AUDIT_ARCH_I386)
	if got := verdict(t, vm, i386); got != verdictKill {
		t.Errorf("an i386 system call: verdict %#x, want kill", got)
	}
	// The rest of the filter's conditions, on the same interpreter.
	for _, c := range []struct {
		nr   int
		args []uint64
		want uint32
	}{
		{unix.SYS_PRCTL, []uint64{unix.PR_GET_SECCOMP}, verdictAllow},
		{unix.SYS_PRCTL, []uint64{unix.PR_GET_SECCOMP | 1<<32}, verdictKill},
		{unix.SYS_PRCTL, []uint64{unix.PR_SET_SECCOMP}, verdictKill},
		{unix.SYS_PRCTL, []uint64{unix.PR_SET_NAME}, verdictKill},
		{unix.SYS_GETUID, nil, verdictAllow},
		{unix.SYS_SETUID, []uint64{0}, verdictKill},
		{unix.SYS_SOCKET, []uint64{unix.AF_UNIX}, verdictAllow},
		{unix.SYS_SOCKET, []uint64{unix.AF_INET}, verdictKill},
		{unix.SYS_SOCKET, []uint64{unix.AF_VSOCK}, verdictKill},
		{unix.SYS_CLONE, []uint64{unix.CLONE_VM | unix.CLONE_THREAD | unix.CLONE_SIGHAND}, verdictAllow},
		{unix.SYS_CLONE, []uint64{uint64(unix.SIGCHLD)}, verdictKill},
		{unix.SYS_CLONE3, nil, verdictENOSYS},
		{unix.SYS_OPENAT, nil, verdictEACCES},
		{unix.SYS_PTRACE, nil, verdictKill},
		// A failed argument check never lets a later comparison read the
		// argument as a system call number (elastic's assembler did).
		{unix.SYS_IOCTL, []uint64{unix.AF_UNIX, unix.SYS_SOCKET}, verdictKill},
		{unix.SYS_IOCTL, []uint64{unix.PR_GET_SECCOMP, unix.SYS_PRCTL}, verdictKill},
		{unix.SYS_IOCTL, []uint64{unix.CLONE_THREAD, unix.SYS_CLONE}, verdictKill},
		{unix.SYS_SOCKET, []uint64{unix.SYS_CLONE, unix.CLONE_THREAD}, verdictKill},
		{unix.SYS_PRCTL, []uint64{unix.SYS_OPENAT}, verdictKill},
		{unix.SYS_IOCTL, []uint64{3, unix.SYS_OPENAT}, verdictKill},
		{0x40000000 | unix.SYS_READ, nil, verdictKill}, // the x32 ABI
	} {
		if got := verdict(t, vm, seccompData(c.nr, c.args...)); got != c.want {
			t.Errorf("system call %d %#x: verdict %#x, want %#x", c.nr, c.args, got, c.want)
		}
	}
}
