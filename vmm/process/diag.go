package process

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm"
)

// dumpVCPUsOnSIGUSR1 makes SIGUSR1 log every vCPU's registers and exit
// counts (vmm.Machine.DumpVCPUs), so a hung guest can be placed without
// stopping it: tests send it before they give up on a boot. The returned
// function stops listening.
func dumpVCPUsOnSIGUSR1(m *vmm.Machine) func() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sigs:
				m.DumpVCPUs()
			case <-done:
				return
			}
		}
	}()
	return func() { signal.Stop(sigs); close(done) }
}

// forbiddenCallOnSIGUSR2 makes SIGUSR2 issue a system call the jail
// forbids (Spec.TestHooks): the trigger of the test that a seccomp
// violation kills the VMM.
func forbiddenCallOnSIGUSR2(log *slog.Logger) {
	hook := make(chan os.Signal, 1)
	signal.Notify(hook, syscall.SIGUSR2)
	go func() {
		<-hook
		log.Warn("test hook: making a forbidden system call")
		log.Error("test hook", "error", jail.ForbiddenSyscall())
	}()
}
