package vmm

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/boot"
)

// hostMemTotal returns the host's MemTotal in bytes.
func hostMemTotal() (uint64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 2 && fields[0] == "MemTotal:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no MemTotal in /proc/meminfo")
}

// allocGuestMemory mmaps guest RAM (around the MMIO gap) and registers each
// region as a KVM memory slot, with flags (kvm.MemLogDirtyPages, or 0).
func allocGuestMemory(vm *kvm.VM, size uint64, flags uint32) (*guestmem.Regions, func(), error) {
	if total, err := hostMemTotal(); err == nil && size > total {
		return nil, nil, fmt.Errorf("guest memory of %d MiB is more than this host has (%d MiB)", size>>20, total>>20)
	}
	var regs []guestmem.Region
	var unmaps []func()
	unmap := func() {
		for _, u := range unmaps {
			u()
		}
	}
	for i, r := range boot.RAMRegions(size) {
		data, unmapRegion, err := mmapGuestRAM(r.Size)
		if err != nil {
			unmap()
			return nil, nil, fmt.Errorf("mmap %d MiB of guest memory: %w", r.Size>>20, err)
		}
		unmaps = append(unmaps, unmapRegion)
		regs = append(regs, guestmem.Region{GuestAddr: r.Addr, Data: data})
		if err := vm.SetUserMemoryRegion(kvm.UserspaceMemoryRegion{
			Slot:          uint32(i),
			Flags:         flags,
			GuestPhysAddr: r.Addr,
			MemorySize:    r.Size,
			UserspaceAddr: uint64(uintptrOf(data)),
		}); err != nil {
			unmap()
			return nil, nil, fmt.Errorf("memory slot %d: %w", i, err)
		}
	}
	mem, err := guestmem.FromRegions(regs...)
	if err != nil {
		unmap()
		return nil, nil, err
	}
	return mem, unmap, nil
}
