package boot

import (
	"encoding/binary"
	"fmt"

	"github.com/cellvm/cellvm/guestmem"
)

// Offsets in struct boot_params (the zero page) and its setup_header, from
// the Linux x86 boot protocol (Documentation/arch/x86/boot.rst).
const (
	ZeroPageSize = 4096

	offExtRamdiskImage = 0x0c0
	offExtRamdiskSize  = 0x0c4
	offExtCmdLinePtr   = 0x0c8
	offE820Entries     = 0x1e8
	SetupHeaderOffset  = 0x1f1
	offSetupSects      = 0x1f1
	offVidMode         = 0x1fa
	offBootFlag        = 0x1fe
	offJump            = 0x200
	offHeader          = 0x202
	offVersion         = 0x206
	offTypeOfLoader    = 0x210
	offLoadFlags       = 0x211
	offCode32Start     = 0x214
	offRamdiskImage    = 0x218
	offRamdiskSize     = 0x21c
	offHeapEndPtr      = 0x224
	offCmdLinePtr      = 0x228
	offInitrdAddrMax   = 0x22c
	offKernelAlignment = 0x230
	offRelocatable     = 0x234
	offXLoadFlags      = 0x236
	offCmdlineSize     = 0x238
	offInitSize        = 0x260
	offE820Table       = 0x2d0
	e820Max            = 128

	HeaderMagic    = 0x53726448 // "HdrS"
	BootFlagMagic  = 0xaa55
	loaderUndef    = 0xff
	loadedHigh     = 0x01
	canUseHeap     = 0x80
	XLFKernel64    = 0x01
	defaultCmdline = 2048
)

// Params is what the zero page tells the kernel.
type Params struct {
	// SetupHeader is the bzImage's setup header (the file's bytes from
	// offset 0x1f1 to the end of the header). Nil for an ELF kernel, which
	// gets a minimal header.
	SetupHeader []byte
	Cmdline     string
	InitrdAddr  uint64
	InitrdSize  uint64
	MemSize     uint64
}

// CmdlineLimit returns the longest command line (with its NUL) the kernel
// with this setup header accepts.
func CmdlineLimit(setupHeader []byte) uint64 {
	if len(setupHeader) >= offCmdlineSize+4-SetupHeaderOffset {
		if v := binary.LittleEndian.Uint32(setupHeader[offCmdlineSize-SetupHeaderOffset:]); v != 0 {
			return uint64(v) + 1
		}
	}
	return defaultCmdline
}

// WriteZeroPage writes boot_params at ZeroPageAddr and the command line at
// CmdlineAddr.
func WriteZeroPage(mem guestmem.Memory, p Params) error {
	if err := checkMemSize(p.MemSize); err != nil {
		return err
	}
	zp := make([]byte, ZeroPageSize)
	le := binary.LittleEndian
	if p.SetupHeader != nil {
		if len(p.SetupHeader) > 0x290-SetupHeaderOffset {
			return fmt.Errorf("setup header of %d bytes is too long", len(p.SetupHeader))
		}
		copy(zp[SetupHeaderOffset:], p.SetupHeader)
	} else {
		le.PutUint16(zp[offBootFlag:], BootFlagMagic)
		le.PutUint32(zp[offHeader:], HeaderMagic)
		le.PutUint16(zp[offVersion:], 0x020f)
		le.PutUint32(zp[offKernelAlignment:], 0x01000000)
	}
	zp[offTypeOfLoader] = loaderUndef
	zp[offLoadFlags] |= loadedHigh | canUseHeap
	le.PutUint16(zp[offHeapEndPtr:], 0xfe00)
	le.PutUint16(zp[offVidMode:], 0xffff)

	limit := CmdlineLimit(p.SetupHeader)
	if limit > CmdlineMax {
		limit = CmdlineMax
	}
	if uint64(len(p.Cmdline))+1 > limit {
		return fmt.Errorf("kernel command line is %d bytes; this kernel takes at most %d", len(p.Cmdline), limit-1)
	}
	cmd := append([]byte(p.Cmdline), 0)
	if err := mem.WriteAt(cmd, CmdlineAddr); err != nil {
		return fmt.Errorf("write command line: %w", err)
	}
	le.PutUint32(zp[offCmdLinePtr:], CmdlineAddr)
	le.PutUint32(zp[offCmdlineSize:], uint32(len(p.Cmdline)))

	if p.InitrdSize > 0 {
		le.PutUint32(zp[offRamdiskImage:], uint32(p.InitrdAddr))
		le.PutUint32(zp[offRamdiskSize:], uint32(p.InitrdSize))
		le.PutUint32(zp[offExtRamdiskImage:], uint32(p.InitrdAddr>>32))
		le.PutUint32(zp[offExtRamdiskSize:], uint32(p.InitrdSize>>32))
	}

	mm := MemoryMap(p.MemSize)
	if len(mm) > e820Max {
		return fmt.Errorf("e820 map has %d entries, at most %d fit", len(mm), e820Max)
	}
	zp[offE820Entries] = uint8(len(mm))
	for i, e := range mm {
		b := zp[offE820Table+20*i:]
		le.PutUint64(b, e.Addr)
		le.PutUint64(b[8:], e.Size)
		le.PutUint32(b[16:], e.Type)
	}
	if err := mem.WriteAt(zp, ZeroPageAddr); err != nil {
		return fmt.Errorf("write zero page: %w", err)
	}
	return nil
}
