package loader

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/boot"
)

// bzImageLoadAddr is where the protected-mode kernel goes (code32_start's
// traditional value); its 64-bit entry is 0x200 bytes in.
const (
	bzImageLoadAddr = boot.HighMemStart
	entry64Offset   = 0x200
	minBootProtocol = 0x20c // 2.12: xloadflags, the 64-bit entry
)

// LoadBzImage loads a bzImage's protected-mode kernel at 1 MiB.
func LoadBzImage(mem guestmem.Memory, r io.ReaderAt, size int64) (Kernel, error) {
	le := binary.LittleEndian
	var first [0x280]byte
	if n, _ := r.ReadAt(first[:], 0); n != len(first) {
		return Kernel{}, fmt.Errorf("bzImage setup header truncated (%d bytes)", n)
	}
	if le.Uint32(first[0x202:]) != boot.HeaderMagic {
		return Kernel{}, fmt.Errorf("no HdrS signature: not a bzImage")
	}
	if v := le.Uint16(first[0x206:]); v < minBootProtocol {
		return Kernel{}, fmt.Errorf("boot protocol %d.%02d is too old (need 2.12 or newer)", v>>8, v&0xff)
	}
	if first[0x236]&boot.XLFKernel64 == 0 {
		return Kernel{}, fmt.Errorf("bzImage has no 64-bit entry point (xloadflags lacks XLF_KERNEL_64)")
	}
	setupSects := int64(first[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	// The header ends at 0x202 + the byte at 0x201 (the jump's displacement).
	hdrEnd := 0x202 + int(first[0x201])
	if hdrEnd > len(first) || hdrEnd <= 0x264 {
		hdrEnd = 0x268
	}
	hdr := append([]byte(nil), first[boot.SetupHeaderOffset:hdrEnd]...)

	kernOff := (setupSects + 1) * 512
	if kernOff >= size {
		return Kernel{}, fmt.Errorf("bzImage truncated: %d bytes, protected-mode kernel starts at %d", size, kernOff)
	}
	kernSize := size - kernOff
	if syssize := int64(le.Uint32(first[0x1f4:])) * 16; syssize > kernSize {
		return Kernel{}, fmt.Errorf("bzImage truncated: header says %d bytes of kernel, file has %d", syssize, kernSize)
	}
	if err := copyIn(mem, r, kernOff, kernSize, bzImageLoadAddr); err != nil {
		return Kernel{}, fmt.Errorf("load bzImage kernel (%d bytes) at %#x: %w", kernSize, bzImageLoadAddr, err)
	}
	end := uint64(bzImageLoadAddr) + uint64(kernSize)
	if initSize := uint64(le.Uint32(first[0x260:])); bzImageLoadAddr+initSize > end {
		end = bzImageLoadAddr + initSize
	}
	if _, err := mem.Slice(bzImageLoadAddr, end-bzImageLoadAddr); err != nil {
		return Kernel{}, fmt.Errorf("bzImage needs %d MiB to decompress; guest memory is too small", end>>20)
	}
	// Tell the kernel where it was put.
	le.PutUint32(hdr[0x214-boot.SetupHeaderOffset:], bzImageLoadAddr)
	return Kernel{Entry: bzImageLoadAddr + entry64Offset, End: end, SetupHeader: hdr, Format: "bzImage"}, nil
}
