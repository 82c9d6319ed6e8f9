// Package boot writes the structures an x86-64 Linux kernel expects to find
// in guest memory when it is entered at its 64-bit entry point: the zero page
// (boot_params with its setup header and e820 map), the command line, a GDT,
// identity-mapped page tables, and an Intel MultiProcessor table that
// announces the vCPUs and the IOAPIC to a kernel built without ACPI.
//
// Everything here is a pure function over guestmem.Memory, so it is tested
// over a byte slice. The fixed addresses live in layout.go.
package boot
