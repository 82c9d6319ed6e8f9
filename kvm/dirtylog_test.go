package kvm

import (
	"slices"
	"testing"
	"unsafe"
)

// TestDirtyLogLayout checks struct kvm_dirty_log's layout on x86-64: the
// slot at 0, the bitmap pointer at 8, 16 bytes in all.
func TestDirtyLogLayout(t *testing.T) {
	var l dirtyLog
	if s := unsafe.Sizeof(l); s != 16 {
		t.Errorf("sizeof(kvm_dirty_log) = %d, want 16", s)
	}
	if o := unsafe.Offsetof(l.Bitmap); o != 8 {
		t.Errorf("offsetof(dirty_bitmap) = %d, want 8", o)
	}
	if MemLogDirtyPages != 1 {
		t.Errorf("KVM_MEM_LOG_DIRTY_PAGES = %d, want 1", MemLogDirtyPages)
	}
}

func TestDirtyBitmapWords(t *testing.T) {
	for _, c := range []struct {
		size uint64
		want int
	}{{0, 0}, {1, 1}, {4096, 1}, {64 * 4096, 1}, {64*4096 + 1, 2}, {65 * 4096, 2}, {1 << 30, 4096}} {
		if got := DirtyBitmapWords(c.size); got != c.want {
			t.Errorf("DirtyBitmapWords(%#x) = %d, want %d", c.size, got, c.want)
		}
	}
}

// TestDirtyPages decodes a bitmap: bit b of word w is page 64w+b, in
// order, and bits past the slot's last page are not pages.
func TestDirtyPages(t *testing.T) {
	bitmap := []uint64{1<<0 | 1<<5 | 1<<63, 0, 1<<1 | 1<<40}
	var got []int
	DirtyPages(bitmap, 3*64, func(p int) { got = append(got, p) })
	if want := []int{0, 5, 63, 129, 168}; !slices.Equal(got, want) {
		t.Errorf("pages %v, want %v", got, want)
	}
	got = nil
	DirtyPages(bitmap, 130, func(p int) { got = append(got, p) })
	if want := []int{0, 5, 63, 129}; !slices.Equal(got, want) {
		t.Errorf("pages of a 130-page slot %v, want %v", got, want)
	}
}
