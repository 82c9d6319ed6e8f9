package jail

import (
	"errors"
	"fmt"
	"slices"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/kvm"
)

// The filter is a plain classic-BPF program (seccompbpf_linux.go), built
// from the tables below and loaded with TSYNC so every thread of the Go
// runtime gets it; pure Go, so the VMM stays a static binary and Drop's
// all-threads system calls work. elastic/go-seccomp-bpf is used only for
// its table of x86-64 system call names: its policy assembler judged calls
// with argument conditions wrongly (see seccompbpf_linux.go).
//
// Only exact values are allowed where an argument decides (equality on all
// 64 bits): the old ioctl rule was written with the library's BitsSet,
// which means "any of these bits is set", and let 31 ioctl type bytes pass
// where only KVM's was meant. A request with junk in its upper half (which
// the kernel would ignore) is killed too.
//
// One filter for every thread: the vCPU threads need less than the others
// (KVM_RUN, the vCPU state reads, futex...), but Go gives no thread of its
// own to anything but a locked goroutine, creates its threads from
// whichever thread runs short, and a filter installed on one thread is
// inherited by the threads it creates: per-thread filters would need the
// vCPU threads to install theirs without TSYNC after the jail, and would
// still leave every other thread with the whole list. Not worth its risk.

// allowed is the VMM's system call allowlist once the guest runs, each with
// why it is needed. Everything else kills the process (SIGSYS), which the
// daemon reports as a sandbox lost to seccomp.
var allowed = []struct {
	names []string
	why   string
}{
	{[]string{"read", "readv", "write", "writev", "pread64", "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "lseek", "close"},
		"device I/O on descriptors opened before the guest ran: disk images, eventfds, the console and log, vsock sockets, and the End report (vmm/control) written into a file handed over as the VMM exits"},
	{[]string{"fsync", "fdatasync", "fallocate", "fstat", "newfstatat"}, "virtio-blk flush, discard and size queries on its disk images"},
	{[]string{"ftruncate"}, "compacting its console log in place once it reaches its cap (the log is the daemon's file, handed over as stdout)"},
	{[]string{"futex", "sched_yield", "nanosleep", "clock_nanosleep", "clock_gettime", "gettimeofday", "getpid", "gettid", "tgkill", "tkill",
		"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall", "exit", "exit_group", "getrandom", "sched_getaffinity", "getrlimit"},
		"the Go runtime: scheduling, timers, signals (tgkill also kicks a vCPU out of KVM_RUN), exit, its random seed"},
	{[]string{"mmap", "munmap", "madvise", "mprotect"}, "the Go runtime's heap and stacks"},
	{[]string{"epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "ppoll", "poll", "eventfd2", "fcntl"},
		"the device workers' event loops and Go's network poller"},
	{[]string{"accept4", "connect", "getsockopt", "setsockopt", "getsockname", "getpeername", "shutdown", "sendmsg", "recvmsg", "sendto", "recvfrom"},
		"vsock: the host side is Unix sockets in the jail's /run (the daemon connects in; guest-initiated connections dial out); the control socket, whose snapshot requests bring the state and memory files as descriptors (recvmsg), so a snapshot needs no open"},
	{[]string{"unlinkat"}, "removing its own vsock and control sockets at exit (only /run is writable)"},
	{[]string{"getuid"}, "the jail's self-check at the first queue pop: the VMM logs its uid, and stops if it is still root"},
}

// jailedIoctls are the ioctl requests the VMM makes once jailed, by their
// <linux/kvm.h> names (numbers from kvm.Requests), each with why. Every
// other request kills the process: every other KVM request (creating VMs
// or vCPUs, mapping memory, setting any state, nested state, memory
// encryption) and every other type. The VMM needs no other type: the TAP
// is attached (TUNSETIFF, TUNSETVNETHDRSZ) before the jail and virtio-net
// sets no offloads (no TUNSETOFFLOAD), and Go's os, net and poll packages
// make descriptors non-blocking and close-on-exec with fcntl and socket
// flags, never FIONBIO, FIOCLEX or TCGETS (the Go runtime issues no ioctl
// at all on Linux outside exec).
//
// What runs jailed: the vCPU threads and the device workers, the control
// socket's pause, save and resume (a save reads every vCPU's and the VM's
// state), a diagnosis dump, and the devices' start after a restore (their
// state is restored before the jail; their queues start after it).
var jailedIoctls = []struct {
	names []string
	why   string
}{
	{[]string{"KVM_RUN"}, "each vCPU thread runs the guest"},
	{[]string{"KVM_IRQ_LINE"}, "the serial port's interrupt, and a virtio device's where KVM has no irqfd for it"},
	{[]string{"KVM_IRQFD", "KVM_IOEVENTFD"},
		"a virtio device's start and reset bind and unbind its eventfds to its interrupt and its notify address: the guest's driver starts its queues after the jail, and so does a restore (fork, template, resume)"},
	{[]string{"KVM_GET_REGS", "KVM_GET_SREGS", "KVM_GET_MP_STATE"}, "a save, and the vCPU dump of a diagnosis (SIGUSR1, a boot that seems stuck)"},
	{[]string{"KVM_GET_XSAVE", "KVM_GET_XSAVE2", "KVM_GET_XCRS", "KVM_GET_DEBUGREGS", "KVM_GET_LAPIC", "KVM_GET_CPUID2", "KVM_GET_MSRS",
		"KVM_GET_VCPU_EVENTS", "KVM_GET_TSC_KHZ"}, "a save reads each parked vCPU's state on its own thread (vmm/vcpu_state.go)"},
	{[]string{"KVM_GET_IRQCHIP", "KVM_GET_PIT2", "KVM_GET_CLOCK"}, "a save reads the VM's interrupt controllers, PIT and clock"},
	{[]string{"KVM_CHECK_EXTENSION", "KVM_GET_MSR_INDEX_LIST"},
		"a save asks KVM whether it has XCRs, how large XSAVE2's area is, and which MSRs it lists: read-only questions to /dev/kvm and the VM"},
	{[]string{"KVM_KVMCLOCK_CTRL"}, "a resume tells each vCPU's guest it was stopped, so its soft-lockup watchdog does not count the pause"},
	{[]string{"KVM_GET_DIRTY_LOG"}, "a checkpoint reads and clears the pages the guest wrote since the one before (a VMM with Spec.Checkpoints)"},
}

// AllowedIoctls is the request numbers jailedIoctls names, in its order.
// It fails if kvm has no request of one of the names (the filter is then
// not built: it fails closed, not open).
func AllowedIoctls() ([]uint64, error) {
	reqs := kvm.Requests()
	var out []uint64
	for _, a := range jailedIoctls {
		for _, name := range a.names {
			n, ok := reqs[name]
			if !ok {
				return nil, fmt.Errorf("jail: the seccomp filter allows %s, which package kvm does not issue", name)
			}
			if !slices.Contains(out, uint64(n)) {
				out = append(out, uint64(n))
			}
		}
	}
	return out, nil
}

// spec is the VMM's filter (see Install).
func spec() (filterSpec, error) {
	ioctls, err := AllowedIoctls()
	if err != nil {
		return filterSpec{}, err
	}
	names := arch.X86_64.SyscallNames
	number := func(name string) int {
		nr, ok := names[name]
		if !ok {
			err = errors.Join(err, fmt.Errorf("jail: no x86-64 system call %q", name))
		}
		return nr
	}
	var s filterSpec
	for _, a := range allowed {
		for _, name := range a.names {
			s.allow = append(s.allow, number(name))
		}
	}
	s.errno = map[int]unix.Errno{
		number("clone3"): unix.ENOSYS, // a libc would fall back to clone
		number("open"):   unix.EACCES, // the Go runtime's occasional look at /proc or /sys fails quietly
		number("openat"): unix.EACCES,
	}
	s.rules = []argRule{
		{nr: number("ioctl"), arg: 1, equal: ioctls},
		// The jail's self-check: the VMM logs its seccomp mode, and stops
		// if it is not 2.
		{nr: number("prctl"), arg: 0, equal: []uint64{unix.PR_GET_SECCOMP}},
		{nr: number("socket"), arg: 0, equal: []uint64{unix.AF_UNIX}},
		// Threads only, never a new process: CLONE_THREAD is one bit, so
		// "any of these bits" means what it reads.
		{nr: number("clone"), arg: 0, bitsSet: unix.CLONE_THREAD},
	}
	return s, err
}

// Install loads the VMM's seccomp filter on every thread of the process.
// Besides the allowlist: ioctl only with the exact requests of
// jailedIoctls; prctl only for PR_GET_SECCOMP; socket only for AF_UNIX;
// clone only for threads (CLONE_THREAD), never a new process; clone3
// answers ENOSYS so a libc would fall back to clone; open and openat
// answer EACCES (the Go runtime's occasional look at /proc or /sys fails
// quietly); every other system call, and any from the x32 ABI or another
// architecture, kills the process.
func Install() error {
	s, err := spec()
	if err != nil {
		return err
	}
	prog, err := s.program()
	if err != nil {
		return fmt.Errorf("jail: the seccomp filter: %w", err)
	}
	if err := load(prog); err != nil {
		return fmt.Errorf("jail: load the seccomp filter: %w", err)
	}
	return nil
}

// ForbiddenSyscall makes a system call the filter does not allow (ptrace).
// It is the trigger of the test that checks a violation kills the VMM; it
// returns only if no filter is installed.
func ForbiddenSyscall() error {
	_, _, e := unix.Syscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
	return fmt.Errorf("ptrace was not stopped by a seccomp filter (errno %v)", e)
}
