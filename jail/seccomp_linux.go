package jail

import (
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// Why elastic/go-seccomp-bpf: it is pure Go (no cgo, so the VMM stays a
// static binary and Drop's all-threads system calls work), it assembles a
// filter from a declarative policy with argument conditions, checks the
// architecture and refuses the x32 ABI, and loads it with TSYNC so every
// thread of the Go runtime gets the same filter. libseccomp-golang would
// need cgo.

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
}

// Install loads the VMM's seccomp filter on every thread of the process.
// Besides the allowlist: ioctl only on KVM (type 0xAE: KVM_RUN, interrupt
// lines, register reads for a diagnosis); socket only for AF_UNIX; clone
// only for threads (CLONE_THREAD), never a new process; clone3 answers
// ENOSYS so a libc would fall back to clone; open and openat answer EACCES
// (the Go runtime's occasional look at /proc or /sys fails quietly); every
// other system call kills the process.
func Install() error {
	policy := seccomp.Policy{DefaultAction: seccomp.ActionKillProcess}
	allow := seccomp.SyscallGroup{Action: seccomp.ActionAllow}
	for _, a := range allowed {
		allow.Names = append(allow.Names, a.names...)
	}
	allow.NamesWithCondtions = []seccomp.NameWithConditions{
		{Name: "ioctl", Conditions: []seccomp.Condition{
			{Argument: 1, Operation: seccomp.BitsSet, Value: 0xae00},
			{Argument: 1, Operation: seccomp.BitsNotSet, Value: 0x5100},
		}},
		{Name: "socket", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.Equal, Value: unix.AF_UNIX}}},
		{Name: "clone", Conditions: []seccomp.Condition{{Argument: 0, Operation: seccomp.BitsSet, Value: unix.CLONE_THREAD}}},
	}
	policy.Syscalls = []seccomp.SyscallGroup{
		allow,
		{Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS), Names: []string{"clone3"}},
		{Action: seccomp.ActionErrno | seccomp.Action(unix.EACCES), Names: []string{"open", "openat"}},
	}
	if err := seccomp.LoadFilter(seccomp.Filter{NoNewPrivs: true, Flag: seccomp.FilterFlagTSync, Policy: policy}); err != nil {
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
