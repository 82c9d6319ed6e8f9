package vmm

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/uart"
)

// Legacy port assignments.
const (
	PortCOM1       = 0x3f8
	PortI8042Data  = 0x60
	PortI8042Cmd   = 0x64
	PortBootMarker = 0x3f0
	IRQCOM1        = 4

	// BootMarkerValue is what the guest writes to PortBootMarker once its
	// init is up (Firecracker's convention).
	BootMarkerValue = 123
	i8042Reset      = 0xfe
)

// uartPort adapts a UART to the port bus.
type uartPort struct{ u *uart.UART }

func (p uartPort) Read(off uint64, data []byte) {
	for i := range data {
		data[i] = p.u.Read(uint8(off) + uint8(i))
	}
}

func (p uartPort) Write(off uint64, data []byte) {
	for i, v := range data {
		p.u.Write(uint8(off)+uint8(i), v)
	}
}

// i8042 is just enough of the keyboard controller for the guest to reset
// the machine with reboot=k: the status register reads as idle, and the
// pulse-reset command (0xfe) ends the VM.
type i8042 struct {
	onReset func()
}

func (d i8042) Read(off uint64, data []byte) { clear(data) }

func (d i8042) Write(off uint64, data []byte) {
	if off == PortI8042Cmd-PortI8042Data && len(data) == 1 && data[0] == i8042Reset {
		d.onReset()
	}
}

// bootMarker records when the guest first writes BootMarkerValue.
type bootMarker struct {
	start   time.Time
	elapsed atomic.Int64 // nanoseconds; 0 until the marker is written
	onMark  func(time.Duration)
}

func (b *bootMarker) Read(off uint64, data []byte) { clear(data) }

func (b *bootMarker) Write(off uint64, data []byte) {
	if len(data) == 0 || data[0] != BootMarkerValue {
		return
	}
	d := time.Since(b.start)
	if b.elapsed.CompareAndSwap(0, int64(d)) && b.onMark != nil {
		b.onMark(d)
	}
}

// warmBootFlag is the BIOS data area's warm-boot flag, and warmBootPanic
// the value Linux writes there before a warm reset.
const (
	warmBootFlag  = 0x472
	warmBootPanic = 0x1234
)

// panicFlag reports whether the guest kernel marked its reset as a panic's.
// With panic_warm on its command line (RebootArgs) Linux's emergency
// restart after a panic writes warmBootPanic to warmBootFlag, and an
// ordinary reboot writes 0, right before the reset. Code in the guest's
// user space cannot write there, so, unlike console text, it cannot fake a
// panic or hide one.
func panicFlag(mem guestmem.Memory) bool {
	var b [2]byte
	if mem == nil || mem.ReadAt(b[:], warmBootFlag) != nil {
		return false
	}
	return binary.LittleEndian.Uint16(b[:]) == warmBootPanic
}
