package kvm

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DevicePath is where the KVM device lives.
const DevicePath = "/dev/kvm"

// ErrNoKVM is wrapped by Open's error when /dev/kvm does not exist.
var ErrNoKVM = errors.New("/dev/kvm is not available")

// System is an open /dev/kvm.
type System struct {
	fd int
}

// Open opens /dev/kvm and checks the API version.
func Open() (*System, error) {
	fd, err := unix.Open(DevicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%w: this host has no hardware virtualization exposed", ErrNoKVM)
		}
		return nil, fmt.Errorf("open %s: %w", DevicePath, err)
	}
	s := &System{fd: fd}
	v, err := ioctl(fd, "KVM_GET_API_VERSION", ioctlGetAPIVersion, 0)
	if err != nil {
		s.Close()
		return nil, err
	}
	if v != 12 {
		s.Close()
		return nil, fmt.Errorf("KVM_GET_API_VERSION: got %d, want 12", v)
	}
	return s, nil
}

// Available reports whether /dev/kvm exists and is a character device.
func Available() bool {
	fi, err := os.Stat(DevicePath)
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Close closes /dev/kvm.
func (s *System) Close() error { return unix.Close(s.fd) }

// CheckExtension returns KVM_CHECK_EXTENSION's answer for cap (0: absent).
func (s *System) CheckExtension(cap int) int {
	r, err := ioctl(s.fd, "KVM_CHECK_EXTENSION", ioctlCheckExtension, uintptr(cap))
	if err != nil {
		return 0
	}
	return int(r)
}

// VCPUMmapSize is the size of each vCPU's kvm_run mapping.
func (s *System) VCPUMmapSize() (int, error) {
	r, err := ioctl(s.fd, "KVM_GET_VCPU_MMAP_SIZE", ioctlGetVCPUMmapSize, 0)
	return int(r), err
}

// SupportedCPUID returns the CPUID leaves KVM can offer a guest on this host.
func (s *System) SupportedCPUID() ([]CPUIDEntry, error) {
	for n := 64; n <= 4096; n *= 2 {
		buf := make([]byte, 8+n*int(unsafe.Sizeof(CPUIDEntry{})))
		*(*uint32)(unsafe.Pointer(&buf[0])) = uint32(n)
		_, err := ioctl(s.fd, "KVM_GET_SUPPORTED_CPUID", ioctlGetSupportedCPUID, uintptr(unsafe.Pointer(&buf[0])))
		if errors.Is(err, unix.E2BIG) {
			continue
		}
		if err != nil {
			return nil, err
		}
		got := int(*(*uint32)(unsafe.Pointer(&buf[0])))
		out := make([]CPUIDEntry, got)
		for i := range out {
			out[i] = *(*CPUIDEntry)(unsafe.Pointer(&buf[8+i*int(unsafe.Sizeof(CPUIDEntry{}))]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("KVM_GET_SUPPORTED_CPUID: more than 4096 entries")
}

// CreateVM creates a virtual machine.
func (s *System) CreateVM() (*VM, error) {
	r, err := ioctl(s.fd, "KVM_CREATE_VM", ioctlCreateVM, 0)
	if err != nil {
		return nil, err
	}
	mmapSize, err := s.VCPUMmapSize()
	if err != nil {
		unix.Close(int(r))
		return nil, err
	}
	return &VM{fd: int(r), sys: s, mmapSize: mmapSize}, nil
}
