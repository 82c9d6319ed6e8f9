package vmm

import (
	"encoding/binary"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
)

func TestPanicFlagReadsTheWarmBootFlag(t *testing.T) {
	mem := guestmem.New(1 << 20)
	if panicFlag(mem) {
		t.Fatal("a reset with the warm-boot flag clear reads as a panic")
	}
	var b [2]byte
	binary.LittleEndian.PutUint16(b[:], warmBootPanic)
	mem.WriteAt(b[:], warmBootFlag)
	if !panicFlag(mem) {
		t.Fatal("a reset with the warm-boot flag at 0x1234 (a panic's, with panic_warm) does not read as a panic")
	}
	if panicFlag(guestmem.New(0x400)) {
		t.Fatal("memory that does not reach the flag reads as a panic")
	}
}
