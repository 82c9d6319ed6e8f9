package boot

import (
	"encoding/binary"
	"fmt"

	"github.com/cellvm/cellvm/guestmem"
)

// Page-table entry bits.
const (
	ptePresent  = 1 << 0
	pteWritable = 1 << 1
	pteHuge     = 1 << 7
)

// WritePageTables identity-maps the first IdentityGiB gigabytes with 2 MiB
// pages, which is what the kernel's 64-bit entry needs until it builds its
// own tables. CR3 must point at PML4Addr.
func WritePageTables(mem guestmem.Memory) error {
	page := make([]byte, 4096)
	le := binary.LittleEndian
	le.PutUint64(page, PDPTAddr|ptePresent|pteWritable)
	if err := mem.WriteAt(page, PML4Addr); err != nil {
		return fmt.Errorf("write PML4: %w", err)
	}
	page = make([]byte, 4096)
	for i := uint64(0); i < IdentityGiB; i++ {
		le.PutUint64(page[8*i:], (PDAddr+i*4096)|ptePresent|pteWritable)
	}
	if err := mem.WriteAt(page, PDPTAddr); err != nil {
		return fmt.Errorf("write PDPT: %w", err)
	}
	pd := make([]byte, 4096*IdentityGiB)
	for i := uint64(0); i < 512*IdentityGiB; i++ {
		le.PutUint64(pd[8*i:], i<<21|ptePresent|pteWritable|pteHuge)
	}
	if err := mem.WriteAt(pd, PDAddr); err != nil {
		return fmt.Errorf("write page directories: %w", err)
	}
	return nil
}

// GDT entries: flat 64-bit code, flat data, and a TSS placeholder.
var gdt = []uint64{
	0,                  // null
	0,                  // unused (selector 0x08)
	0x00af9b000000ffff, // BootCS: code, 64-bit, present, DPL 0
	0x00cf93000000ffff, // BootDS: data, read/write, present, 4 GiB
	0x00808b0000000067, // BootTR: 64-bit TSS, busy
}

// WriteGDT writes the boot GDT at GDTAddr and an empty IDT at IDTAddr, and
// returns the GDT's limit.
func WriteGDT(mem guestmem.Memory) (uint16, error) {
	b := make([]byte, 8*len(gdt))
	for i, e := range gdt {
		binary.LittleEndian.PutUint64(b[8*i:], e)
	}
	if err := mem.WriteAt(b, GDTAddr); err != nil {
		return 0, fmt.Errorf("write GDT: %w", err)
	}
	if err := mem.WriteAt(make([]byte, 8), IDTAddr); err != nil {
		return 0, fmt.Errorf("write IDT: %w", err)
	}
	return uint16(len(b) - 1), nil
}
