package loader

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/boot"
)

const (
	elfHeaderSize   = 64
	elfPhdrSize     = 56
	elfMaxPhdrs     = 64
	ptLoad          = 1
	elfClass64      = 2
	elfDataLSB      = 1
	elfMachineX8664 = 62
	elfTypeExec     = 2
)

// LoadELF loads an x86-64 ELF vmlinux: each PT_LOAD segment at its physical
// address, the rest of its memory size zeroed (sparse.go: the pages that
// read zero already are not written).
func LoadELF(mem guestmem.Memory, r io.ReaderAt, size int64) (Kernel, error) {
	var eh [elfHeaderSize]byte
	if n, _ := r.ReadAt(eh[:], 0); n != len(eh) {
		return Kernel{}, fmt.Errorf("ELF header truncated (%d bytes)", n)
	}
	le := binary.LittleEndian
	if string(eh[:4]) != "\x7fELF" || eh[4] != elfClass64 || eh[5] != elfDataLSB {
		return Kernel{}, fmt.Errorf("not a little-endian 64-bit ELF file")
	}
	if m := le.Uint16(eh[18:]); m != elfMachineX8664 {
		return Kernel{}, fmt.Errorf("ELF machine %d is not x86-64", m)
	}
	if t := le.Uint16(eh[16:]); t != elfTypeExec {
		return Kernel{}, fmt.Errorf("ELF type %d is not an executable", t)
	}
	entry := le.Uint64(eh[24:])
	phoff := le.Uint64(eh[32:])
	phentsize := le.Uint16(eh[54:])
	phnum := le.Uint16(eh[56:])
	if phentsize != elfPhdrSize || phnum == 0 || phnum > elfMaxPhdrs {
		return Kernel{}, fmt.Errorf("ELF has %d program headers of %d bytes", phnum, phentsize)
	}
	if phoff > uint64(size) || uint64(phnum)*elfPhdrSize > uint64(size)-phoff {
		return Kernel{}, fmt.Errorf("ELF program headers lie outside the %d-byte file", size)
	}
	ph := make([]byte, int(phnum)*elfPhdrSize)
	if n, _ := r.ReadAt(ph, int64(phoff)); n != len(ph) {
		return Kernel{}, fmt.Errorf("ELF program headers truncated")
	}
	k := Kernel{Entry: entry, Format: "elf"}
	loaded := 0
	entryInside := false
	for i := 0; i < int(phnum); i++ {
		p := ph[i*elfPhdrSize:]
		if le.Uint32(p) != ptLoad {
			continue
		}
		off := le.Uint64(p[8:])
		paddr := le.Uint64(p[24:])
		filesz := le.Uint64(p[32:])
		memsz := le.Uint64(p[40:])
		if filesz > memsz {
			return Kernel{}, fmt.Errorf("segment %d: file size %d exceeds memory size %d", i, filesz, memsz)
		}
		if off > uint64(size) || filesz > uint64(size)-off {
			return Kernel{}, fmt.Errorf("segment %d: bytes [%d, +%d) lie outside the %d-byte file (truncated?)", i, off, filesz, size)
		}
		if paddr < boot.HighMemStart {
			return Kernel{}, fmt.Errorf("segment %d: physical address %#x is below 1 MiB", i, paddr)
		}
		dst, err := mem.Slice(paddr, memsz)
		if err != nil {
			return Kernel{}, fmt.Errorf("segment %d at %#x (%d bytes) does not fit in guest memory: %w", i, paddr, memsz, err)
		}
		if err := copyIn(mem, r, int64(off), int64(filesz), paddr); err != nil {
			return Kernel{}, fmt.Errorf("segment %d: %w", i, err)
		}
		clearPages(dst[filesz:])
		if end := paddr + memsz; end > k.End {
			k.End = end
		}
		if entry >= paddr && entry-paddr < memsz {
			entryInside = true
		}
		loaded++
	}
	if loaded == 0 {
		return Kernel{}, fmt.Errorf("ELF has no loadable segment")
	}
	if !entryInside {
		return Kernel{}, fmt.Errorf("ELF entry %#x is not in a loaded segment (is this a vmlinux?)", entry)
	}
	return k, nil
}
