package vmm

import (
	"bytes"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// The memory file is guest RAM, region after region (snapshot.MemoryLayout).
// Pages that are all zero are left as holes, so a guest that touched little
// of its memory makes a small file; they read back as zeros.

const pageSize = 4096

// writeRun is how much guest memory writeMemory looks at per write.
const writeRun = 2 << 20

// writeMemory writes guest memory to f as the memory file: f is emptied,
// sized, and every page that is not all zero written at its place.
func writeMemory(f *os.File, mem *guestmem.Regions, layout []snapshot.MemoryRegion) error {
	regs := mem.List()
	if len(regs) != len(layout) {
		return fmt.Errorf("memory file: %d regions, the layout has %d", len(regs), len(layout))
	}
	var total uint64
	for _, l := range layout {
		total += l.Size
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("memory file: %w", err)
	}
	if err := f.Truncate(int64(total)); err != nil {
		return fmt.Errorf("memory file: size it to %d MiB: %w", total>>20, err)
	}
	zero := make([]byte, pageSize)
	for i, r := range regs {
		l := layout[i]
		if r.GuestAddr != l.GuestAddr || uint64(len(r.Data)) != l.Size {
			return fmt.Errorf("memory file: region %d is %#x+%#x, the layout says %#x+%#x", i, r.GuestAddr, len(r.Data), l.GuestAddr, l.Size)
		}
		for off := 0; off < len(r.Data); {
			// Skip zero pages, then write the run of non-zero pages that
			// follows (at most writeRun bytes).
			for off < len(r.Data) && bytes.Equal(r.Data[off:off+pageSize], zero) {
				off += pageSize
			}
			end := off
			for end < len(r.Data) && end-off < writeRun && !bytes.Equal(r.Data[end:end+pageSize], zero) {
				end += pageSize
			}
			if end > off {
				if _, err := f.WriteAt(r.Data[off:end], int64(l.FileOffset)+int64(off)); err != nil {
					return fmt.Errorf("memory file: write guest memory at %#x: %w", r.GuestAddr+uint64(off), err)
				}
			}
			off = end
		}
	}
	return nil
}

// mapGuestMemoryFile maps the memory file as guest RAM (mapMemoryFile) and
// registers each region as a KVM memory slot.
func mapGuestMemoryFile(vm *kvm.VM, f *os.File, layout []snapshot.MemoryRegion) (*guestmem.Regions, func(), error) {
	mem, unmap, err := mapMemoryFile(f, layout)
	if err != nil {
		return nil, nil, err
	}
	for i, r := range mem.List() {
		if err := vm.SetUserMemoryRegion(kvm.UserspaceMemoryRegion{
			Slot: uint32(i), GuestPhysAddr: r.GuestAddr, MemorySize: uint64(len(r.Data)), UserspaceAddr: uint64(uintptrOf(r.Data)),
		}); err != nil {
			unmap()
			return nil, nil, fmt.Errorf("memory slot %d: %w", i, err)
		}
	}
	return mem, unmap, nil
}

// mapMemoryFile maps the memory file's regions private and copy-on-write:
// pages are read from the file when the guest first touches them, a write
// gives the guest a copy of its own, and every VM restored from the same
// file shares the pages none of them wrote (in the host's page cache). The
// file must not change while a VM runs from it.
func mapMemoryFile(f *os.File, layout []snapshot.MemoryRegion) (*guestmem.Regions, func(), error) {
	var total uint64
	for _, l := range layout {
		total += l.Size
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("memory file: %w", err)
	}
	if uint64(fi.Size()) != total {
		return nil, nil, fmt.Errorf("memory file %s holds %d bytes, the snapshot's memory is %d: it is not this snapshot's memory file", f.Name(), fi.Size(), total)
	}
	if host, err := hostMemTotal(); err == nil && total > host {
		return nil, nil, fmt.Errorf("guest memory of %d MiB is more than this host has (%d MiB)", total>>20, host>>20)
	}
	var regs []guestmem.Region
	unmap := func() {
		for _, r := range regs {
			unix.Munmap(r.Data)
		}
	}
	for i, l := range layout {
		if l.Size == 0 || l.Size%pageSize != 0 || l.FileOffset%pageSize != 0 {
			unmap()
			return nil, nil, fmt.Errorf("memory region %d (%#x bytes at file offset %#x) is not whole pages", i, l.Size, l.FileOffset)
		}
		data, err := unix.Mmap(int(f.Fd()), int64(l.FileOffset), int(l.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_NORESERVE)
		if err != nil {
			unmap()
			return nil, nil, fmt.Errorf("map %d MiB of the memory file: %w", l.Size>>20, err)
		}
		regs = append(regs, guestmem.Region{GuestAddr: l.GuestAddr, Data: data})
	}
	mem, err := guestmem.FromRegions(regs...)
	if err != nil {
		unmap()
		return nil, nil, err
	}
	return mem, unmap, nil
}
