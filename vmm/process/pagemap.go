package process

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// openPagemap opens /proc/self/pagemap so that it shows no page frame
// numbers. A save reads it to skip the pages the guest never touched
// (vmm's untouched.go), which needs only the present and swapped bits;
// the frame numbers are the host's physical addresses, a Rowhammer aid
// that a compromised VMM must not have.
//
// The kernel decides whether a pagemap file shows frame numbers from the
// credentials of whoever opened it (pagemap_read's file_ns_capable on the
// file's f_cred, CAP_SYS_ADMIN), so what counts is the opener at open, not
// the reader later: a file root opened keeps showing them after the VMM
// drops to its jail's uid. And the VMM must open it before its jail, whose
// root has no /proc. So it is opened on a thread of its own whose
// effective set lacks CAP_SYS_ADMIN (capabilities are per thread), and
// that thread is thrown away: the goroutine ends locked to it, which makes
// the Go runtime end the thread rather than reuse it, so no other code runs
// with its changed capabilities.
func openPagemap() (*os.File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	done := make(chan opened, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		f, err := openWithoutSysAdmin("/proc/self/pagemap")
		done <- opened{f, err}
	}()
	r := <-done
	return r.f, r.err
}

// openWithoutSysAdmin opens path read-only after taking CAP_SYS_ADMIN out
// of the calling thread's effective set. The caller is locked to its
// thread and never gives it back.
func openWithoutSysAdmin(path string) (*os.File, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3} // Pid 0: this thread
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	data[unix.CAP_SYS_ADMIN/32].Effective &^= 1 << (unix.CAP_SYS_ADMIN % 32)
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return nil, fmt.Errorf("capset without CAP_SYS_ADMIN: %w", err)
	}
	return os.Open(path)
}
