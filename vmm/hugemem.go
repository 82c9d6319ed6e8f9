package vmm

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePageSize is x86-64's 2 MiB page.
const hugePageSize = 2 << 20

// mmapGuestRAM maps size bytes of anonymous guest RAM at a 2 MiB aligned
// address, asks for transparent huge pages there, and returns it with its
// unmap. KVM maps guest memory in 2 MiB pages only where the host backs it
// with a huge page and the guest-physical and host-virtual addresses agree
// modulo 2 MiB: an mmap that is merely page-aligned, as Linux before 6.7
// places one, gets 4 KiB pages in the guest's nested page tables, and a
// nested fault for every 4 KiB the guest first touches.
//
// madvise(MADV_HUGEPAGE) is what QEMU and Cloud Hypervisor ask by default.
// The host's THP mode decides: "always" or "madvise" gives huge pages,
// "never" none; a kernel without THP answers EINVAL, which changes
// nothing. It is asked before the kernel is loaded, not after: in the
// nested rig, a guest whose kernel sat in 4 KiB pages booted as slowly as
// with no huge pages at all, though the VMM's own writes of the kernel
// may then wait for the host to find huge pages (docs/benchmarks.md).
//
// The cost is memory: the host backs a guest's first touch of a 2 MiB
// range with all of it. A snapshot's memory file does not grow (its
// writer leaves zero pages as holes), and a restored machine maps its
// memory file, not this.
func mmapGuestRAM(size uint64) ([]byte, func(), error) {
	if size == 0 || size%pageSize != 0 {
		return nil, nil, fmt.Errorf("guest RAM of %#x bytes is not whole pages", size)
	}
	span := uintptr(size) + hugePageSize
	raw, err := unix.MmapPtr(-1, 0, nil, span, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, nil, err
	}
	// The slack before and after goes back; what is left is one mapping.
	head, tail := hugeSlack(uintptr(raw))
	if head > 0 {
		unix.MunmapPtr(raw, head)
	}
	if tail > 0 {
		unix.MunmapPtr(unsafe.Add(raw, head+uintptr(size)), tail)
	}
	data := unsafe.Slice((*byte)(unsafe.Add(raw, head)), size)
	unix.Madvise(data, unix.MADV_HUGEPAGE)
	return data, func() { unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(data)), uintptr(size)) }, nil
}

// hugeSlack splits the 2 MiB of slack of a mapping at base: head bytes
// before its first 2 MiB boundary, where the RAM starts, and tail bytes
// after the RAM's end.
func hugeSlack(base uintptr) (head, tail uintptr) {
	head = (hugePageSize - base%hugePageSize) % hugePageSize
	return head, hugePageSize - head
}
