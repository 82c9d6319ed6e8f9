package kvm

import (
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ExitReason is kvm_run.exit_reason.
type ExitReason uint32

// Exit reasons the VMM handles or reports.
const (
	ExitUnknown       ExitReason = 0
	ExitException     ExitReason = 1
	ExitIO            ExitReason = 2
	ExitHypercall     ExitReason = 3
	ExitDebug         ExitReason = 4
	ExitHLT           ExitReason = 5
	ExitMMIO          ExitReason = 6
	ExitIRQWindowOpen ExitReason = 7
	ExitShutdown      ExitReason = 8
	ExitFailEntry     ExitReason = 9
	ExitIntr          ExitReason = 10
	ExitInternalError ExitReason = 17
	ExitSystemEvent   ExitReason = 24
)

var exitNames = map[ExitReason]string{
	ExitUnknown: "UNKNOWN", ExitException: "EXCEPTION", ExitIO: "IO", ExitHypercall: "HYPERCALL",
	ExitDebug: "DEBUG", ExitHLT: "HLT", ExitMMIO: "MMIO", ExitIRQWindowOpen: "IRQ_WINDOW_OPEN",
	ExitShutdown: "SHUTDOWN", ExitFailEntry: "FAIL_ENTRY", ExitIntr: "INTR",
	ExitInternalError: "INTERNAL_ERROR", ExitSystemEvent: "SYSTEM_EVENT",
}

func (r ExitReason) String() string {
	if s, ok := exitNames[r]; ok {
		return "KVM_EXIT_" + s
	}
	return fmt.Sprintf("KVM_EXIT_%d", uint32(r))
}

// System event types (kvm_run.system_event.type).
const (
	SystemEventShutdown = 1
	SystemEventReset    = 2
	SystemEventCrash    = 3
)

// Offsets into struct kvm_run (x86-64).
const (
	runImmediateExit = 1
	runExitReason    = 8
	runUnion         = 32
)

// ErrInterrupted is returned by Run when KVM_RUN was interrupted by a signal
// (for example a Kick): the caller checks why and calls Run again.
var ErrInterrupted = errors.New("KVM_RUN interrupted")

// Run enters the guest until the next exit and returns its reason.
func (c *VCPU) Run() (ExitReason, error) {
	c.tid.Store(int32(unix.Gettid()))
	_, err := ioctl(c.fd, "KVM_RUN", ioctlRun, 0)
	if err != nil {
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			return ExitIntr, ErrInterrupted
		}
		return 0, fmt.Errorf("vcpu %d: %w", c.ID, err)
	}
	return ExitReason(binary.LittleEndian.Uint32(c.run[runExitReason:])), nil
}

// SetImmediateExit makes the next (or current, after a Kick) KVM_RUN return
// at once with EINTR.
func (c *VCPU) SetImmediateExit(on bool) {
	var v uint8
	if on {
		v = 1
	}
	c.run[runImmediateExit] = v
}

// ImmediateExit reports whether immediate_exit is set (by SetImmediateExit
// or Kick): a KVM_RUN that returned ErrInterrupted with it clear was
// interrupted by some other signal (Go's runtime preempts goroutines with
// SIGURG), and the vCPU may simply run again.
func (c *VCPU) ImmediateExit() bool { return c.run[runImmediateExit] != 0 }

// Kick sets immediate_exit and signals the vCPU's thread so a KVM_RUN in
// progress returns. SIGURG is used because the Go runtime always handles it
// (it is its preemption signal) and ignores it when unexpected.
func (c *VCPU) Kick() {
	c.SetImmediateExit(true)
	if tid := c.tid.Load(); tid != 0 {
		unix.Tgkill(unix.Getpid(), int(tid), unix.SIGURG)
	}
}

// IOExit is the io member of kvm_run for an ExitIO.
type IOExit struct {
	Out  bool
	Size int // bytes per access: 1, 2 or 4
	Port uint16
	// Data is the buffer in kvm_run: for an out, what the guest wrote; for
	// an in, where the VMM puts what the guest reads. Count accesses of Size
	// bytes each.
	Data []byte
}

// IO decodes the io exit. It is valid until the next Run.
func (c *VCPU) IO() (IOExit, error) {
	u := c.run[runUnion:]
	size := int(u[1])
	count := int(binary.LittleEndian.Uint32(u[4:]))
	off := binary.LittleEndian.Uint64(u[8:])
	n := uint64(size) * uint64(count)
	if size == 0 || off >= uint64(len(c.run)) || n > uint64(len(c.run))-off {
		return IOExit{}, fmt.Errorf("vcpu %d: malformed io exit (size %d, count %d, offset %d)", c.ID, size, count, off)
	}
	return IOExit{
		Out:  u[0] == 1,
		Size: size,
		Port: binary.LittleEndian.Uint16(u[2:]),
		Data: c.run[off : off+n],
	}, nil
}

// MMIOExit is the mmio member of kvm_run for an ExitMMIO.
type MMIOExit struct {
	Addr  uint64
	Write bool
	// Data is the access's bytes in kvm_run: written by the guest, or to be
	// filled for a read.
	Data []byte
}

// MMIO decodes the mmio exit. It is valid until the next Run.
func (c *VCPU) MMIO() (MMIOExit, error) {
	u := c.run[runUnion:]
	l := binary.LittleEndian.Uint32(u[16:])
	if l == 0 || l > 8 {
		return MMIOExit{}, fmt.Errorf("vcpu %d: malformed mmio exit (len %d)", c.ID, l)
	}
	return MMIOExit{
		Addr:  binary.LittleEndian.Uint64(u[0:]),
		Write: u[20] != 0,
		Data:  u[8 : 8+l],
	}, nil
}

// SystemEventType is system_event.type for an ExitSystemEvent.
func (c *VCPU) SystemEventType() uint32 {
	return binary.LittleEndian.Uint32(c.run[runUnion:])
}

// FailEntryReason is fail_entry.hardware_entry_failure_reason.
func (c *VCPU) FailEntryReason() uint64 {
	return binary.LittleEndian.Uint64(c.run[runUnion:])
}

// InternalError is internal.suberror for an ExitInternalError.
func (c *VCPU) InternalError() uint32 {
	return binary.LittleEndian.Uint32(c.run[runUnion:])
}
