package kvm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const kvmio = 0xAE

const (
	iocNone  = 0
	iocWrite = 1
	iocRead  = 2
)

func ioc(dir, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | kvmio<<8 | nr
}

func ion(nr uintptr) uintptr        { return ioc(iocNone, nr, 0) }
func iow(nr, size uintptr) uintptr  { return ioc(iocWrite, nr, size) }
func ior(nr, size uintptr) uintptr  { return ioc(iocRead, nr, size) }
func iowr(nr, size uintptr) uintptr { return ioc(iocRead|iocWrite, nr, size) }
func sizeOf[T any]() uintptr        { var v T; return unsafe.Sizeof(v) }
func ptr[T any](v *T) uintptr       { return uintptr(unsafe.Pointer(v)) }

// Ioctl numbers, from <linux/kvm.h>.
var (
	ioctlGetAPIVersion       = ion(0x00)
	ioctlCreateVM            = ion(0x01)
	ioctlCheckExtension      = ion(0x03)
	ioctlGetVCPUMmapSize     = ion(0x04)
	ioctlGetSupportedCPUID   = iowr(0x05, 8)
	ioctlCreateVCPU          = ion(0x41)
	ioctlGetDirtyLog         = iow(0x42, sizeOf[dirtyLog]())
	ioctlSetUserMemoryRegion = iow(0x46, sizeOf[UserspaceMemoryRegion]())
	ioctlSetTSSAddr          = ion(0x47)
	ioctlSetIdentityMapAddr  = iow(0x48, 8)
	ioctlCreateIRQChip       = ion(0x60)
	ioctlIRQLine             = iow(0x61, sizeOf[irqLevel]())
	ioctlIRQFD               = iow(0x76, sizeOf[irqfd]())
	ioctlCreatePIT2          = iow(0x77, sizeOf[pitConfig]())
	ioctlIOEventFD           = iow(0x79, sizeOf[ioeventfd]())
	ioctlRun                 = ion(0x80)
	ioctlGetRegs             = ior(0x81, sizeOf[Regs]())
	ioctlSetRegs             = iow(0x82, sizeOf[Regs]())
	ioctlGetSregs            = ior(0x83, sizeOf[Sregs]())
	ioctlSetSregs            = iow(0x84, sizeOf[Sregs]())
	ioctlGetMSRs             = iowr(0x88, 8)
	ioctlSetMSRs             = iow(0x89, 8)
	ioctlGetFPU              = ior(0x8c, sizeOf[FPU]())
	ioctlSetFPU              = iow(0x8d, sizeOf[FPU]())
	ioctlSetCPUID2           = iow(0x90, 8)
	ioctlGetMPState          = ior(0x98, 4)
	ioctlEnableCap           = iow(0xa3, sizeOf[enableCap]())
	ioctlGetXCRS             = ior(0xa6, sizeOf[xcrs]())
	ioctlSetXCRS             = iow(0xa7, sizeOf[xcrs]())
)

// ioctl issues one ioctl and names it in the error.
func ioctl(fd int, name string, req, arg uintptr) (uintptr, error) {
	for {
		r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
		if errno == unix.EINTR && name != "KVM_RUN" {
			continue
		}
		if errno != 0 {
			return r, fmt.Errorf("%s: %w", name, errno)
		}
		return r, nil
	}
}
