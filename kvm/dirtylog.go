package kvm

import (
	"fmt"
	"math/bits"
	"unsafe"
)

// KVM's dirty page log: with MemLogDirtyPages on a memory slot, KVM
// records each page the guest writes in that slot, one bit per page, and
// GetDirtyLog hands the bitmap over and clears it (without
// KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2, which cellvm does not enable, the
// get clears and write-protects again in one ioctl). It sees only the
// guest's own writes: what the VMM writes into guest memory from the host
// side is not in it (package guestmem logs the devices' writes).

// MemLogDirtyPages is KVM_MEM_LOG_DIRTY_PAGES, a UserspaceMemoryRegion flag.
const MemLogDirtyPages = 1 << 0

// dirtyLog is struct kvm_dirty_log: the slot, and the address of the
// bitmap KVM fills (a union with a u64 pad).
type dirtyLog struct {
	Slot   uint32
	_      uint32
	Bitmap uint64
}

// DirtyBitmapWords is how many 64-bit words a slot of size bytes needs
// for its dirty bitmap: one bit per 4 KiB page, rounded up to a whole
// word, as KVM sizes it.
func DirtyBitmapWords(size uint64) int {
	pages := (size + pageSize - 1) / pageSize
	return int((pages + 63) / 64)
}

const pageSize = 4096

// GetDirtyLog copies slot's dirty page bitmap into bitmap and clears KVM's
// (KVM_GET_DIRTY_LOG): bit p of word p/64 is the slot's page p. bitmap
// must have DirtyBitmapWords(slot size) words, or more; KVM writes that
// many. The slot must have been registered with MemLogDirtyPages.
func (vm *VM) GetDirtyLog(slot uint32, bitmap []uint64) error {
	if len(bitmap) == 0 {
		return fmt.Errorf("KVM_GET_DIRTY_LOG: slot %d: no bitmap", slot)
	}
	l := dirtyLog{Slot: slot, Bitmap: uint64(uintptr(unsafe.Pointer(&bitmap[0])))}
	_, err := ioctl(vm.fd, "KVM_GET_DIRTY_LOG", ioctlGetDirtyLog, ptr(&l))
	return err
}

// DirtyPages calls f with the index of each page whose bit is set in
// bitmap, in order, up to pages pages (a bitmap's tail past the slot is
// ignored).
func DirtyPages(bitmap []uint64, pages int, f func(page int)) {
	for w, word := range bitmap {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			p := w*64 + b
			if p >= pages {
				return
			}
			f(p)
			word &= word - 1
		}
	}
}
