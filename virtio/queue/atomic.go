package queue

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/cellvm/cellvm/guestmem"
)

// The ring indices and the event fields are shared with the driver running
// on another CPU, so they are read and written with atomic operations: that
// gives the ordering the virtio memory model asks for (descriptors and buffers
// written before idx are visible once idx is) and keeps the Go memory model
// (and the race detector) satisfied when both sides are Go, as in the tests.
// Go has no 16-bit atomics, so a 16-bit field is accessed through the aligned
// 32-bit word that holds it. Hosts are little-endian (amd64, arm64), like the
// virtio 1.x rings.

// Load16 atomically reads the little-endian 16-bit ring field at addr, which
// must be 2-byte aligned.
func Load16(mem guestmem.Memory, addr uint64) (uint16, error) {
	if addr%2 != 0 {
		return 0, fmt.Errorf("misaligned ring field at %#x", addr)
	}
	if p, shift, ok := word(mem, addr); ok {
		return uint16(atomic.LoadUint32(p) >> shift), nil
	}
	var b [2]byte
	if err := mem.ReadAt(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b[:]), nil
}

// Store16 atomically writes the little-endian 16-bit ring field at addr,
// which must be 2-byte aligned. It is a full memory barrier.
func Store16(mem guestmem.Memory, addr uint64, v uint16) error {
	if addr%2 != 0 {
		return fmt.Errorf("misaligned ring field at %#x", addr)
	}
	if p, shift, ok := word(mem, addr); ok {
		guestmem.MarkDirty(mem, addr, 2)
		mask := uint32(0xffff) << shift
		for {
			old := atomic.LoadUint32(p)
			if atomic.CompareAndSwapUint32(p, old, old&^mask|uint32(v)<<shift) {
				return nil
			}
		}
	}
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], v)
	return mem.WriteAt(b[:], addr)
}

// word returns the host address of the aligned 32-bit word holding the
// 16-bit field at addr, and the field's bit offset in it. ok is false when
// that word is not wholly in one region or not host-aligned; the caller then
// falls back to a plain access.
func word(mem guestmem.Memory, addr uint64) (p *uint32, shift uint, ok bool) {
	base := addr &^ 3
	b, err := mem.Slice(base, 4)
	if err != nil {
		return nil, 0, false
	}
	ptr := unsafe.Pointer(unsafe.SliceData(b))
	if uintptr(ptr)%4 != 0 {
		return nil, 0, false
	}
	return (*uint32)(ptr), uint(addr-base) * 8, true
}
