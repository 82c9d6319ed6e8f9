package guestmem

import (
	"errors"
	"testing"
)

func TestBounds(t *testing.T) {
	m, err := FromRegions(Region{GuestAddr: 0x1000, Data: make([]byte, 0x1000)}, Region{GuestAddr: 0x10000, Data: make([]byte, 16)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.WriteAt([]byte{1, 2, 3}, 0x1ffd); err != nil {
		t.Fatalf("write at end of region: %v", err)
	}
	for _, c := range []struct{ addr, n uint64 }{
		{0, 1}, {0xfff, 2}, {0x1ffe, 3}, {0x2000, 1}, {0x1000, 0x1001}, {^uint64(0), 2}, {0x10000, ^uint64(0)}, {0x10008, 9},
	} {
		if _, err := m.Slice(c.addr, c.n); !errors.Is(err, ErrOutOfBounds) {
			t.Errorf("Slice(%#x, %#x) = %v, want out of bounds", c.addr, c.n, err)
		}
	}
	b := make([]byte, 3)
	if err := m.ReadAt(b, 0x1ffd); err != nil || b[2] != 3 {
		t.Fatalf("read back %v %v", b, err)
	}
	if _, err := FromRegions(Region{GuestAddr: 0, Data: make([]byte, 10)}, Region{GuestAddr: 5, Data: make([]byte, 10)}); err == nil {
		t.Fatal("overlapping regions accepted")
	}
}
