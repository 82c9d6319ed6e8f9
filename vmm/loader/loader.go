// Package loader puts a Linux kernel and an initrd into guest memory: an
// uncompressed ELF vmlinux (its PT_LOAD segments at their physical
// addresses, entered at e_entry) or a bzImage (the protected-mode part at
// 1 MiB, entered at its 64-bit entry 0x200 bytes in, with its setup header
// handed on in the zero page).
//
// The files are the user's, not the guest's, but a truncated or malformed
// one still gets a clear error and never a panic or a write outside guest
// memory: every offset and size is checked before it is used.
package loader

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/boot"
)

// Kernel is a loaded kernel.
type Kernel struct {
	// Entry is the guest physical address of the 64-bit entry point.
	Entry uint64
	// End is the first guest physical address above everything the kernel
	// needs (its image, bss, and for a bzImage the room it decompresses
	// into); the initrd must go above it.
	End uint64
	// SetupHeader is a bzImage's setup header, for the zero page; nil for ELF.
	SetupHeader []byte
	// Format is "elf" or "bzImage".
	Format string
}

// ErrUnknownFormat is returned for a file that is neither an ELF nor a bzImage.
var ErrUnknownFormat = errors.New("not an x86-64 ELF vmlinux or a bzImage")

// LoadKernelFile loads the kernel at path, detecting its format.
func LoadKernelFile(mem guestmem.Memory, path string) (Kernel, error) {
	f, err := os.Open(path)
	if err != nil {
		return Kernel{}, fmt.Errorf("open kernel: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Kernel{}, fmt.Errorf("stat kernel: %w", err)
	}
	k, err := LoadKernel(mem, f, fi.Size())
	if err != nil {
		return Kernel{}, fmt.Errorf("kernel %s: %w", path, err)
	}
	return k, nil
}

// LoadKernel loads an ELF vmlinux or a bzImage of size bytes from r.
func LoadKernel(mem guestmem.Memory, r io.ReaderAt, size int64) (Kernel, error) {
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil {
		return Kernel{}, fmt.Errorf("%w (file too short: %v)", ErrUnknownFormat, err)
	}
	if string(magic[:]) == "\x7fELF" {
		return LoadELF(mem, r, size)
	}
	var hdr [4]byte
	if _, err := r.ReadAt(hdr[:], 0x202); err == nil && binary.LittleEndian.Uint32(hdr[:]) == boot.HeaderMagic {
		return LoadBzImage(mem, r, size)
	}
	return Kernel{}, ErrUnknownFormat
}

// LoadInitrd puts the initrd at path as high in low memory as it fits
// (page aligned, below maxAddr and the MMIO gap, above the kernel) and
// returns where.
func LoadInitrd(mem guestmem.Memory, memSize uint64, path string, k Kernel, maxAddr uint64) (addr, size uint64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("open initrd: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("stat initrd: %w", err)
	}
	size = uint64(fi.Size())
	top := memSize
	if top > boot.MMIOGapStart {
		top = boot.MMIOGapStart
	}
	if maxAddr != 0 && top > maxAddr+1 {
		top = maxAddr + 1
	}
	if size == 0 || size > top {
		return 0, 0, fmt.Errorf("initrd %s of %d bytes does not fit in %d MiB of guest memory", path, size, memSize>>20)
	}
	addr = (top - size) &^ 0xfff
	if addr < k.End {
		return 0, 0, fmt.Errorf("initrd %s (%d MiB) and kernel (ends at %d MiB) do not both fit in %d MiB of guest memory; give the VM more memory",
			path, size>>20, k.End>>20, memSize>>20)
	}
	if err := copyIn(mem, f, 0, int64(size), addr); err != nil {
		return 0, 0, fmt.Errorf("load initrd %s: %w", path, err)
	}
	return addr, size, nil
}
