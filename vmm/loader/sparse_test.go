package loader

import (
	"bytes"
	"runtime/debug"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
)

// TestLoadLeavesZeroPagesAlone loads an ELF whose segment has a zero page
// and a bss into mapped memory whose pages that must stay unwritten are
// read-only: a write to one faults, and the test fails. A page that is
// zero in the file but not in guest memory, and a bss page that is not
// zero, are written.
func TestLoadLeavesZeroPagesAlone(t *testing.T) {
	const size = 32 << 20
	data, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(data)
	mem, err := guestmem.FromRegions(guestmem.Region{GuestAddr: 0, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	const paddr, pg = 0x1000000, pageSize
	// The segment: page 0 code, page 1 zero (fresh in memory), page 2
	// zero (dirty in memory), page 3 code; then a bss of pages 4 (fresh),
	// 5 (dirty) and 6 (fresh).
	code := make([]byte, 4*pg)
	code[0], code[4*pg-1] = 0x90, 0xc3
	img := makeELF(paddr, code, 3*pg, 0)
	page := func(i int) []byte { return data[paddr+i*pg : paddr+(i+1)*pg] }
	page(2)[100] = 0xaa
	page(5)[pg-1] = 0xbb
	for _, i := range []int{1, 4, 6} {
		if err := unix.Mprotect(page(i), unix.PROT_READ); err != nil {
			t.Fatal(err)
		}
	}
	func() {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the loader wrote a page that reads zero in the file and in guest memory: %v", r)
			}
		}()
		if _, err := LoadKernel(mem, bytes.NewReader(img), int64(len(img))); err != nil {
			t.Fatal(err)
		}
	}()
	for i := 0; i < 7; i++ {
		want := make([]byte, pg)
		if i < 4 {
			want = code[i*pg : (i+1)*pg]
		}
		if !bytes.Equal(page(i), want) {
			t.Errorf("page %d of the segment is not the file's (or zero)", i)
		}
	}
}

func TestCopyPagesUnaligned(t *testing.T) {
	src := make([]byte, 3*pageSize+123)
	dst := bytes.Repeat([]byte{7}, len(src))
	src[pageSize+5] = 1
	copyPages(dst, src)
	if !bytes.Equal(dst, src) {
		t.Fatal("copyPages did not make dst equal src")
	}
	clearPages(dst[10:])
	if !isZero(dst[:pageSize]) || !bytes.Equal(dst[10:], make([]byte, len(dst)-10)) {
		t.Fatal("clearPages left bytes")
	}
}
