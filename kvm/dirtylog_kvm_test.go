package kvm_test

import (
	"errors"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/kvm"
)

// TestGetDirtyLog: a slot registered with MemLogDirtyPages answers
// KVM_GET_DIRTY_LOG (nothing written yet: all clear), and one without
// the flag is refused (ENOENT). It needs a /dev/kvm that creates VMs, not
// one that runs cellvm's guests (the machine test in vmm checks what the
// guest writes).
func TestGetDirtyLog(t *testing.T) {
	sys, err := kvm.Open()
	if err != nil {
		t.Skipf("no /dev/kvm: %v", err)
	}
	defer sys.Close()
	vm, err := sys.CreateVM()
	if err != nil {
		t.Skipf("KVM_CREATE_VM: %v", err)
	}
	defer vm.Close()
	const size = 130 * 4096
	for slot, flags := range []uint32{kvm.MemLogDirtyPages, 0} {
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(mem)
		if err := vm.SetUserMemoryRegion(kvm.UserspaceMemoryRegion{Slot: uint32(slot), Flags: flags,
			GuestPhysAddr: uint64(slot) << 30, MemorySize: size, UserspaceAddr: uint64(uintptr(unsafe.Pointer(&mem[0])))}); err != nil {
			t.Fatalf("slot %d with flags %#x: %v", slot, flags, err)
		}
	}
	bm := make([]uint64, kvm.DirtyBitmapWords(size))
	for i := range bm {
		bm[i] = ^uint64(0)
	}
	if err := vm.GetDirtyLog(0, bm); err != nil {
		t.Fatalf("KVM_GET_DIRTY_LOG of a logged slot: %v", err)
	}
	for i, w := range bm {
		if w != 0 {
			t.Errorf("word %d of a fresh slot's log is %#x, want 0", i, w)
		}
	}
	if err := vm.GetDirtyLog(1, bm); !errors.Is(err, unix.ENOENT) {
		t.Errorf("KVM_GET_DIRTY_LOG of a slot without the log: %v, want ENOENT", err)
	}
}
