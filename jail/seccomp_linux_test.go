package jail

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/kvm"
)

// envSeccompCase makes the test binary a child of TestSeccompIoctls: it
// installs the filter, then makes the system call the variable names.
const envSeccompCase = "CELLVM_SECCOMP_TEST_CASE"

// Requests the VMM never makes, from <linux/kvm.h> on x86-64.
const (
	kvmSetNestedState   = 0x4080aebf // _IOW(KVMIO, 0xbf, struct kvm_nested_state)
	kvmMemoryEncryptOp  = 0xc008aeba // _IOWR(KVMIO, 0xba, unsigned long)
	kvmSetGSIRouting    = 0x4008ae6a // _IOW(KVMIO, 0x6a, struct kvm_irq_routing)
	kvmSetUserMemRegion = 0x4020ae46 // _IOW(KVMIO, 0x46, struct kvm_userspace_memory_region)
)

// TestSeccompChild is not a test: it is what the children of
// TestSeccompIoctls run. Each installs the VMM's filter, makes its system
// calls, prints their results and exits 0, unless the filter killed it.
func TestSeccompChild(t *testing.T) {
	c := os.Getenv(envSeccompCase)
	if c == "" {
		t.Skip("run by TestSeccompIoctls")
	}
	if err := Install(); err != nil {
		fmt.Println("install:", err)
		os.Exit(3)
	}
	kind, arg, _ := strings.Cut(c, ":")
	switch kind {
	case "ioctl": // one request, on a descriptor that is not open
		req, _ := strconv.ParseUint(arg, 0, 64)
		_, _, e := unix.Syscall(unix.SYS_IOCTL, 999, uintptr(req), 0)
		fmt.Printf("ioctl %#x: %d\n", req, e)
	case "allowed": // every allowed request, then the self-check's calls
		reqs, _ := AllowedIoctls()
		for _, req := range reqs {
			_, _, e := unix.Syscall(unix.SYS_IOCTL, 999, uintptr(req), 0)
			fmt.Printf("ioctl %#x: %d\n", req, e)
		}
		mode, _, e := unix.Syscall(unix.SYS_PRCTL, unix.PR_GET_SECCOMP, 0, 0)
		fmt.Printf("seccomp mode %d %d\n", mode, e)
		fmt.Printf("uid %d\n", os.Getuid())
	case "prctl":
		op, _ := strconv.ParseUint(arg, 0, 64)
		_, _, e := unix.Syscall(unix.SYS_PRCTL, uintptr(op), 0, 0)
		fmt.Printf("prctl %d: %d\n", op, e)
	}
	os.Exit(0)
}

// runSeccompChild runs the test binary as a child for case c and returns
// what it printed and how it ended.
func runSeccompChild(t *testing.T, c string) (string, syscall.WaitStatus) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSeccompChild$")
	cmd.Env = append(os.Environ(), envSeccompCase+"="+c)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", c, err)
	}
	return string(out), cmd.ProcessState.Sys().(syscall.WaitStatus)
}

// TestSeccompIoctls checks the filter's ioctl rule in children of the
// test binary, without /dev/kvm (every call is on a descriptor that is not
// open, so an allowed one answers EBADF and a forbidden one never gets to
// the kernel's ioctl code): every allowed request survives; every type
// byte the old "any of 0xAE's bits" rule let through dies, and so do
// common requests of other types; so do the KVM requests the VMM never
// makes jailed (a new VM, nested state, memory encryption, and every
// request of package kvm not on the list) and an allowed request with
// bits above the 32 the kernel reads.
func TestSeccompIoctls(t *testing.T) {
	if os.Getenv(envSeccompCase) != "" {
		t.Skip("a child")
	}
	out, ws := runSeccompChild(t, "allowed")
	if ws.Signaled() || ws.ExitStatus() != 0 {
		t.Fatalf("the allowed requests' child ended %v; it printed:\n%s", ws, out)
	}
	allowed, err := AllowedIoctls()
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range allowed {
		if want := fmt.Sprintf("ioctl %#x: %d\n", req, unix.EBADF); !strings.Contains(out, want) {
			t.Errorf("allowed request %#x did not answer EBADF; the child printed:\n%s", req, out)
		}
	}
	if !strings.Contains(out, "seccomp mode 2 0\n") || !strings.Contains(out, fmt.Sprintf("uid %d\n", os.Getuid())) {
		t.Errorf("the self-check's prctl(PR_GET_SECCOMP) or getuid failed; the child printed:\n%s", out)
	}

	var denied []uint64
	// Every type byte t with t&0xae != 0 and t&0x51 == 0: what the old rule
	// (BitsSet 0xae00, BitsNotSet 0x5100) let through.
	for typ := uint64(1); typ < 256; typ++ {
		if typ&0xae != 0 && typ&0x51 == 0 && typ != 0xae {
			denied = append(denied, typ<<8, 0xc0080000|typ<<8|0x01)
		}
	}
	denied = append(denied,
		unix.TCGETS, unix.TIOCSTI, 0x5421 /* FIONBIO */, 0x5451 /* FIOCLEX */, unix.TUNSETIFF, unix.TUNSETOFFLOAD,
		unix.SIOCGIFFLAGS, unix.FICLONE, unix.RNDADDENTROPY, unix.LOOP_CTL_GET_FREE, unix.FS_IOC_GETFLAGS,
		0xae01, // KVM_CREATE_VM
		kvmSetNestedState, kvmMemoryEncryptOp, kvmSetGSIRouting, kvmSetUserMemRegion,
		1<<32|0xae80, // KVM_RUN with junk above the 32 bits the kernel reads
	)
	// Requests equal to open's, openat's and clone3's numbers: elastic's
	// assembler answered them EACCES and ENOSYS (seccompbpf_linux.go).
	denied = append(denied, unix.SYS_OPEN, unix.SYS_OPENAT, unix.SYS_CLONE3)
	for _, req := range kvm.Requests() {
		if !slices.Contains(allowed, uint64(req)) {
			denied = append(denied, uint64(req))
		}
	}
	for _, req := range denied {
		if slices.Contains(allowed, req) {
			t.Errorf("request %#x is on the allowed list", req)
			continue
		}
		out, ws := runSeccompChild(t, fmt.Sprintf("ioctl:%#x", req))
		if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
			t.Errorf("ioctl %#x: the child ended %v, want killed by SIGSYS; it printed %q", req, ws, out)
		}
	}

	// prctl is allowed for PR_GET_SECCOMP only.
	for _, op := range []int{unix.PR_SET_NAME, unix.PR_SET_DUMPABLE, unix.PR_SET_SECCOMP, unix.PR_SET_NO_NEW_PRIVS} {
		out, ws := runSeccompChild(t, fmt.Sprintf("prctl:%d", op))
		if !ws.Signaled() || ws.Signal() != syscall.SIGSYS {
			t.Errorf("prctl %d: the child ended %v, want killed by SIGSYS; it printed %q", op, ws, out)
		}
	}
}
