package block

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// FuzzRequest lays the input over guest memory (byte 0: queue size as
// 1 << (b%9), byte 1: head, byte 2 bit 0: indirect allowed, descriptor table
// at 16), walks the chain and runs it as a request against a 16-sector disk.
// Nothing may panic, the status byte must be the chain's last written byte,
// and the file must keep its size.
func FuzzRequest(f *testing.F) {
	for _, s := range requestSeeds() {
		f.Add(s)
	}
	path := filepath.Join(f.TempDir(), "disk")
	if err := os.WriteFile(path, make([]byte, 16*SectorSize), 0o600); err != nil {
		f.Fatal(err)
	}
	file, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		f.Fatal(err)
	}
	b, err := New(file, false, "fuzz", nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	f.Fuzz(func(t *testing.T, data []byte) {
		mem := guestmem.New(1 << 16)
		raw, _ := mem.Slice(0, 1<<16)
		copy(raw, data)
		var p [3]byte
		copy(p[:], data)
		cfg := queue.Config{Size: 1 << (p[0] % 9), DescAddr: 16, Indirect: p[2]&1 == 1}
		c, err := queue.ReadChain(mem, cfg, uint16(p[1]))
		if err != nil {
			return
		}
		written := b.handle(&virtio.Activation{Mem: mem}, c)
		if written > c.WritableLen {
			t.Fatalf("wrote %d bytes into %d", written, c.WritableLen)
		}
		if _, err := parseRequest(mem, c); err == nil && written != c.WritableLen {
			t.Fatalf("valid request wrote %d of %d bytes", written, c.WritableLen)
		}
		if st, _ := file.Stat(); st.Size() != 16*SectorSize {
			t.Fatalf("disk grew to %d bytes", st.Size())
		}
	})
}

// requestSeeds are well-formed requests: IN, OUT, FLUSH, GET_ID, and one
// past the end.
func requestSeeds() [][]byte {
	mk := func(typ uint32, sector uint64, descs [][4]uint64) []byte {
		out := make([]byte, 0x700)
		out[0] = 3
		for i, d := range descs {
			o := 16 + 16*i
			binary.LittleEndian.PutUint64(out[o:], d[0])
			binary.LittleEndian.PutUint32(out[o+8:], uint32(d[1]))
			binary.LittleEndian.PutUint16(out[o+12:], uint16(d[2]))
			binary.LittleEndian.PutUint16(out[o+14:], uint16(d[3]))
		}
		binary.LittleEndian.PutUint32(out[0x200:], typ)
		binary.LittleEndian.PutUint64(out[0x208:], sector)
		return out
	}
	const next, write = uint64(queue.DescFlagNext), uint64(queue.DescFlagWrite)
	return [][]byte{
		mk(TypeIn, 1, [][4]uint64{{0x200, 16, next, 1}, {0x400, 512, next | write, 2}, {0x600, 1, write, 0}}),
		mk(TypeOut, 2, [][4]uint64{{0x200, 16, next, 1}, {0x400, 512, next, 2}, {0x600, 1, write, 0}}),
		mk(TypeFlush, 0, [][4]uint64{{0x200, 16, next, 1}, {0x600, 1, write, 0}}),
		mk(TypeGetID, 0, [][4]uint64{{0x200, 16, next, 1}, {0x400, 20, next | write, 2}, {0x600, 1, write, 0}}),
		mk(TypeIn, 15, [][4]uint64{{0x200, 16, next, 1}, {0x400, 1024, next | write, 2}, {0x600, 1, write, 0}}),
	}
}
