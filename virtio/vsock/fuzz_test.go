package vsock

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
)

// FuzzPacket lays the input over guest memory (byte 0: queue size as
// 1 << (b%9), byte 1: head, byte 2 bit 0: indirect allowed, descriptor table
// at 16), walks the chain and parses it as a tx packet. An accepted packet
// must have its whole payload in the chain, within MaxPayload, and its
// header must round-trip.
func FuzzPacket(f *testing.F) {
	for _, s := range packetSeeds() {
		f.Add(s)
	}
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
		h, payload, err := parsePacket(mem, c)
		if err != nil {
			return
		}
		if h.Len > MaxPayload || (h.Op != OpRW && h.Len != 0) {
			t.Fatalf("accepted header %+v", h)
		}
		got, err := io.ReadAll(io.LimitReader(payload, int64(h.Len)))
		if err != nil || len(got) != int(h.Len) {
			t.Fatalf("payload %d of %d bytes: %v", len(got), h.Len, err)
		}
		var b [HeaderLen]byte
		h.Encode(b[:])
		var h2 Header
		h2.Decode(b[:])
		if h2 != h {
			t.Fatalf("header round trip: %+v != %+v", h2, h)
		}
	})
}

// packetSeeds are well-formed packets: REQUEST, RW with its payload in the
// header's buffer and in a second one, SHUTDOWN.
func packetSeeds() [][]byte {
	mk := func(h Header, payload []byte, descs [][4]uint64) []byte {
		out := make([]byte, 0x600)
		out[0] = 3
		for i, d := range descs {
			o := 16 + 16*i
			binary.LittleEndian.PutUint64(out[o:], d[0])
			binary.LittleEndian.PutUint32(out[o+8:], uint32(d[1]))
			binary.LittleEndian.PutUint16(out[o+12:], uint16(d[2]))
			binary.LittleEndian.PutUint16(out[o+14:], uint16(d[3]))
		}
		h.SrcCID, h.DstCID, h.Type, h.Len = 3, HostCID, TypeStream, uint32(len(payload))
		h.Encode(out[0x200:])
		copy(out[0x200+HeaderLen:], payload)
		return out
	}
	next := uint64(queue.DescFlagNext)
	return [][]byte{
		mk(Header{SrcPort: 1000, DstPort: 52, Op: OpRequest, BufAlloc: 1 << 18}, nil, [][4]uint64{{0x200, HeaderLen, 0, 0}}),
		mk(Header{SrcPort: 1000, DstPort: 52, Op: OpRW}, []byte("hello"), [][4]uint64{{0x200, HeaderLen + 5, 0, 0}}),
		mk(Header{SrcPort: 1000, DstPort: 52, Op: OpRW}, []byte("hello"), [][4]uint64{{0x200, HeaderLen, next, 1}, {0x200 + HeaderLen, 5, 0, 0}}),
		mk(Header{SrcPort: 1000, DstPort: 52, Op: OpShutdown, Flags: 3}, nil, [][4]uint64{{0x200, HeaderLen, 0, 0}}),
	}
}
