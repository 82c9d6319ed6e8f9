package boot

import (
	"encoding/binary"
	"fmt"

	"github.com/cellvm/cellvm/guestmem"
)

// MP table entry types and flags, from the Intel MultiProcessor
// Specification 1.4 as Linux's arch/x86/include/asm/mpspec_def.h names them.
const (
	mpProcessor = 0
	mpBus       = 1
	mpIOAPIC    = 2
	mpIntSrc    = 3
	mpLIntSrc   = 4

	mpIntINT    = 0
	mpIntNMI    = 1
	mpIntExtINT = 3

	cpuEnabled        = 1
	cpuBootProcessor  = 2
	apicVersion       = 0x14
	ioapicVersion     = 0x11
	cpuSignature      = 0x600 // family 6
	cpuFeatureFPUAPIC = 1<<0 | 1<<9

	mpFloatSize    = 16
	mpHeaderSize   = 44
	mpCPUSize      = 20
	mpSmallEntry   = 8
	mpAreaSize     = 0xa0000 - MPTableAddr
	lapicBroadcast = 0xff
)

// MPTableSize is the number of bytes WriteMPTable writes for n vCPUs.
func MPTableSize(n int) int {
	return mpFloatSize + mpHeaderSize + n*mpCPUSize + mpSmallEntry*(2+IOAPICPins+2)
}

// IOAPICID is the APIC ID the MP table gives the IOAPIC for n vCPUs.
func IOAPICID(n int) uint8 { return uint8(n + 1) }

func checksum(b []byte) uint8 {
	var s uint8
	for _, x := range b {
		s += x
	}
	return -s
}

// WriteMPTable writes an MP floating pointer and configuration table at
// MPTableAddr announcing n vCPUs (APIC IDs 0..n-1, the first the boot
// processor), one ISA bus, the IOAPIC with ISA IRQ i on pin i, and the
// usual ExtINT/NMI local interrupts.
func WriteMPTable(mem guestmem.Memory, n int) error {
	if n < 1 || n > MaxVCPUs {
		return fmt.Errorf("%d vCPUs: the MP table holds 1 to %d", n, MaxVCPUs)
	}
	size := MPTableSize(n)
	if size > mpAreaSize {
		return fmt.Errorf("MP table of %d bytes does not fit in %d", size, mpAreaSize)
	}
	le := binary.LittleEndian
	b := make([]byte, size)
	fl := b[:mpFloatSize]
	copy(fl, "_MP_")
	le.PutUint32(fl[4:], MPTableAddr+mpFloatSize)
	fl[8] = 1 // length in 16-byte units
	fl[9] = 4 // spec revision 1.4

	cfg := b[mpFloatSize:]
	copy(cfg, "PCMP")
	le.PutUint16(cfg[4:], uint16(size-mpFloatSize))
	cfg[6] = 4
	copy(cfg[8:16], "CELLVM  ")
	copy(cfg[16:28], "000000000000")
	le.PutUint16(cfg[34:], uint16(n+2+IOAPICPins+2)) // entry count
	le.PutUint32(cfg[36:], LAPICAddr)

	e := cfg[mpHeaderSize:]
	for i := 0; i < n; i++ {
		e[0] = mpProcessor
		e[1] = uint8(i)
		e[2] = apicVersion
		e[3] = cpuEnabled
		if i == 0 {
			e[3] |= cpuBootProcessor
		}
		le.PutUint32(e[4:], cpuSignature)
		le.PutUint32(e[8:], cpuFeatureFPUAPIC)
		e = e[mpCPUSize:]
	}
	e[0] = mpBus
	e[1] = 0
	copy(e[2:8], "ISA   ")
	e = e[mpSmallEntry:]

	ioapic := IOAPICID(n)
	e[0] = mpIOAPIC
	e[1] = ioapic
	e[2] = ioapicVersion
	e[3] = cpuEnabled
	le.PutUint32(e[4:], IOAPICAddr)
	e = e[mpSmallEntry:]

	for pin := 0; pin < IOAPICPins; pin++ {
		e[0] = mpIntSrc
		e[1] = mpIntINT
		e[4] = 0 // ISA bus
		e[5] = uint8(pin)
		e[6] = ioapic
		e[7] = uint8(pin)
		e = e[mpSmallEntry:]
	}
	e[0], e[1], e[6], e[7] = mpLIntSrc, mpIntExtINT, 0, 0
	e = e[mpSmallEntry:]
	e[0], e[1], e[6], e[7] = mpLIntSrc, mpIntNMI, lapicBroadcast, 1

	cfg[7] = checksum(cfg)
	fl[10] = checksum(fl)
	if err := mem.WriteAt(b, MPTableAddr); err != nil {
		return fmt.Errorf("write MP table: %w", err)
	}
	return nil
}
