// Package guestmem is the guest's physical memory as the VMM and its devices
// see it: a set of non-overlapping regions of host memory, each at a guest
// physical address. Every access is bounds-checked, because addresses come
// from the guest and the guest is hostile: a bad address is an error, never a
// panic and never a host access outside the region.
//
// Devices take the Memory interface, so they are tested over a plain byte
// slice (New) with no /dev/kvm, and run over the mmapped KVM memory slots
// (FromRegions) in a real VM.
package guestmem

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// Memory is what a device needs of guest memory.
type Memory interface {
	// ReadAt copies len(p) bytes from guest physical address addr.
	ReadAt(p []byte, addr uint64) error
	// WriteAt copies p to guest physical address addr.
	WriteAt(p []byte, addr uint64) error
	// Slice returns the host bytes backing [addr, addr+n), which must lie
	// in one region. Writes through it reach the guest.
	Slice(addr, n uint64) ([]byte, error)
}

// ErrOutOfBounds is wrapped by every error for an access outside guest memory.
var ErrOutOfBounds = errors.New("guest address out of bounds")

// Region is one contiguous piece of guest physical memory.
type Region struct {
	GuestAddr uint64
	Data      []byte
}

// Regions is guest memory made of one or more regions. It implements Memory.
type Regions struct {
	regs []Region
	// dirty is the devices' dirty log, one bitmap per region (dirty.go);
	// nil when off. It is published whole, so a device that marks while
	// it is turned on sees either no log or all of it.
	dirty atomic.Pointer[[][]atomic.Uint64]
}

// New returns size bytes of zeroed guest memory at guest address 0, backed by
// an ordinary Go slice (for tests and fuzzing).
func New(size uint64) *Regions {
	return &Regions{regs: []Region{{GuestAddr: 0, Data: make([]byte, size)}}}
}

// FromRegions returns guest memory over the given regions, which must not
// overlap.
func FromRegions(regs ...Region) (*Regions, error) {
	for i, a := range regs {
		if uint64(len(a.Data)) > ^uint64(0)-a.GuestAddr {
			return nil, fmt.Errorf("region %d at %#x wraps the address space", i, a.GuestAddr)
		}
		for j, b := range regs {
			if i < j && a.GuestAddr < b.GuestAddr+uint64(len(b.Data)) && b.GuestAddr < a.GuestAddr+uint64(len(a.Data)) {
				return nil, fmt.Errorf("regions %d and %d overlap", i, j)
			}
		}
	}
	return &Regions{regs: append([]Region(nil), regs...)}, nil
}

// List returns the regions.
func (m *Regions) List() []Region { return m.regs }

// Size is the total number of bytes of guest memory.
func (m *Regions) Size() uint64 {
	var n uint64
	for _, r := range m.regs {
		n += uint64(len(r.Data))
	}
	return n
}

// Slice implements Memory.
func (m *Regions) Slice(addr, n uint64) ([]byte, error) {
	for _, r := range m.regs {
		size := uint64(len(r.Data))
		if addr >= r.GuestAddr && addr-r.GuestAddr <= size {
			off := addr - r.GuestAddr
			if n > size-off {
				break
			}
			return r.Data[off : off+n : off+n], nil
		}
	}
	return nil, fmt.Errorf("%w: [%#x, +%#x)", ErrOutOfBounds, addr, n)
}

// ReadAt implements Memory.
func (m *Regions) ReadAt(p []byte, addr uint64) error {
	b, err := m.Slice(addr, uint64(len(p)))
	if err != nil {
		return err
	}
	copy(p, b)
	return nil
}

// WriteAt implements Memory. The write is marked in the dirty log, when
// on (dirty.go).
func (m *Regions) WriteAt(p []byte, addr uint64) error {
	b, err := m.Slice(addr, uint64(len(p)))
	if err != nil {
		return err
	}
	m.MarkDirty(addr, uint64(len(p)))
	copy(b, p)
	return nil
}
