package newmachine

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Reseed and SetClock change the machine they run on, so they run in the
// guest (the rig's fork tests); here, the structure the kernel reads.
func TestPoolInfo(t *testing.T) {
	e := bytes.Repeat([]byte{0xab}, 64)
	b := poolInfo(e)
	if len(b) != 72 || binary.LittleEndian.Uint32(b) != 512 || binary.LittleEndian.Uint32(b[4:]) != 64 || !bytes.Equal(b[8:], e) {
		t.Fatalf("rand_pool_info %x", b[:8])
	}
}
