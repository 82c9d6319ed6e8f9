// Package bootmarker writes the boot-time marker: one byte, 123, to I/O
// port 0x3f0, which the VMM traps to time the guest's boot (the same
// convention Firecracker uses). It needs ioperm(2), which is per thread,
// so the write happens on a locked OS thread.
package bootmarker

import (
	"fmt"
	"runtime"
)

// Port and Value of the marker.
const (
	Port  = 0x3f0
	Value = 123
)

// Write writes the marker. It fails where ioperm is not permitted (no
// CAP_SYS_RAWIO, or not amd64); the caller logs that and goes on.
func Write() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ioperm(Port, 1, true); err != nil {
		return fmt.Errorf("ioperm(0x%x): %w", Port, err)
	}
	outb(Port, Value)
	// Drop the permission so the thread goes back to the pool clean.
	_ = ioperm(Port, 1, false)
	return nil
}
