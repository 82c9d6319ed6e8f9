package process

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// rewriteArgvOnSIGWINCH (Spec.TestHooks) makes SIGWINCH overwrite the
// process's argv in its own memory, as a compromised VMM can: its
// /proc/PID/cmdline then no longer names its spec. It is the trigger of
// the test that a restarted daemon still finds, and kills, a VMM by what
// it recorded of it (pid, start time, cgroup), not by its argv. SIGWINCH
// because a VMM without the hook ignores it, and no terminal sends it one
// (the VMM runs in a session of its own).
func rewriteArgvOnSIGWINCH(log *slog.Logger) {
	hook := make(chan os.Signal, 1)
	signal.Notify(hook, syscall.SIGWINCH)
	go func() {
		for range hook {
			rewriteArgv(os.Args)
			log.Warn("test hook: rewrote the process's argv")
		}
	}()
}

// rewriteArgv overwrites every byte of args with 'x', in place. The Go
// runtime's os.Args are the kernel's argv strings, not copies, so this
// writes the memory /proc/PID/cmdline reads (the stack's argument area);
// the NULs between them stay, so the kernel reads no further.
func rewriteArgv(args []string) {
	for _, a := range args {
		if len(a) == 0 {
			continue
		}
		b := unsafe.Slice(unsafe.StringData(a), len(a))
		for i := range b {
			b[i] = 'x'
		}
	}
}
