// Package kvm is a thin, typed layer over the /dev/kvm ioctls: the system,
// VM and vCPU file descriptors, the mmapped kvm_run area, user memory slots,
// the in-kernel irqchip and PIT, CPUID, MSRs, registers, the FPU,
// KVM_IRQ_LINE, irqfd and ioeventfd.
//
// It holds no policy: which CPUID bits a guest sees or how memory is laid out
// belongs to vmm/. Every error names the ioctl that failed, so a failure deep
// in machine setup still says what the kernel refused.
//
// The structures mirror <linux/kvm.h> for x86-64 byte for byte; their sizes
// are checked by tests, since the ioctl numbers encode them.
package kvm
