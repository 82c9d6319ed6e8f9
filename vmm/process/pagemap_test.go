package process

import (
	"encoding/binary"
	"os"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	pmPresent = 1 << 63
	pmPFN     = 1<<55 - 1
)

// pagemapEntry reads the page map entry of the page at addr.
func pagemapEntry(t *testing.T, pm *os.File, addr uintptr) uint64 {
	t.Helper()
	var b [8]byte
	if _, err := pm.ReadAt(b[:], int64(addr/uintptr(os.Getpagesize()))*8); err != nil {
		t.Fatalf("read the page map: %v", err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// TestPagemapShowsNoFrameNumbers: the page map the VMM opens gives a
// touched page's present bit (what a save needs) and no frame number,
// even to root; a plain open by root shows the frame number (where this
// root has CAP_SYS_ADMIN in the initial user namespace), which is what
// the VMM used to hold.
func TestPagemapShowsNoFrameNumbers(t *testing.T) {
	page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(page)
	page[0] = 1 // touched: present, with a frame
	addr := uintptr(unsafe.Pointer(&page[0]))

	pm, err := openPagemap()
	if err != nil {
		t.Fatalf("openPagemap: %v", err)
	}
	defer pm.Close()
	e := pagemapEntry(t, pm, addr)
	if e&pmPresent == 0 {
		t.Fatalf("entry %#x: a touched page is not present (a save would skip it)", e)
	}
	if e&pmPFN != 0 {
		t.Fatalf("entry %#x: frame number %#x shown to the VMM", e, e&pmPFN)
	}

	// This goroutine's thread kept its capabilities: a plain open here
	// shows frames where root may see them.
	if os.Geteuid() != 0 {
		t.Skip("not root: the comparison with a privileged open needs root")
	}
	plain, err := os.Open("/proc/self/pagemap")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if pe := pagemapEntry(t, plain, addr); pe&pmPFN == 0 {
		t.Skipf("entry %#x: root here sees no frame numbers either (no CAP_SYS_ADMIN in the initial user namespace)", pe)
	}
}
