package queue_test

import (
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/virtio/queue"
)

// fuzzMemSize is the guest memory a fuzz input is laid over.
const fuzzMemSize = 1 << 16

// fuzzChainMemory interprets input as guest memory: byte 0 picks the queue
// size (1 << (b%9)), byte 1 the head, byte 2 bit 0 whether indirect
// descriptors are negotiated; the descriptor table starts at 16.
func fuzzChainMemory(data []byte) (guestmem.Memory, queue.Config, uint16) {
	mem := guestmem.New(fuzzMemSize)
	b, _ := mem.Slice(0, fuzzMemSize)
	copy(b, data)
	var p [3]byte
	copy(p[:], data)
	cfg := queue.Config{Size: 1 << (p[0] % 9), DescAddr: 16, Indirect: p[2]&1 == 1}
	return mem, cfg, uint16(p[1])
}

// seedChain builds a fuzz input: descriptors (addr, len, flags, next)
// written at 16, buffers at their addresses.
func seedChain(sizeExp, head, indirect byte, descs [][4]uint64, bufs map[uint64][]byte) []byte {
	end := 16 + 16*len(descs)
	for a, d := range bufs {
		end = max(end, int(a)+len(d))
	}
	out := make([]byte, end)
	out[0], out[1], out[2] = sizeExp, head, indirect
	for i, d := range descs {
		o := 16 + 16*i
		binary.LittleEndian.PutUint64(out[o:], d[0])
		binary.LittleEndian.PutUint32(out[o+8:], uint32(d[1]))
		binary.LittleEndian.PutUint16(out[o+12:], uint16(d[2]))
		binary.LittleEndian.PutUint16(out[o+14:], uint16(d[3]))
	}
	for a, d := range bufs {
		copy(out[a:], d)
	}
	return out
}

func FuzzReadChain(f *testing.F) {
	f.Add(seedChain(3, 0, 0, [][4]uint64{{0x400, 8, 1, 1}, {0x500, 8, 2, 0}}, nil))
	f.Add(seedChain(3, 0, 1, [][4]uint64{{0x400, 32, 4, 0}}, map[uint64][]byte{0x400: make([]byte, 32)}))
	f.Add(seedChain(2, 1, 0, [][4]uint64{{0x400, 8, 1, 1}, {0x500, 8, 1, 0}}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		mem, cfg, head := fuzzChainMemory(data)
		c, err := queue.ReadChain(mem, cfg, head)
		if err != nil {
			if !errors.Is(err, queue.ErrMalformed) {
				t.Fatalf("error not wrapping ErrMalformed: %v", err)
			}
			return
		}
		// Invariants of an accepted chain.
		var r, w uint64
		for _, b := range c.Readable {
			if _, err := mem.Slice(b.Addr, uint64(b.Len)); err != nil || b.Len == 0 {
				t.Fatalf("readable buffer %+v: %v", b, err)
			}
			r += uint64(b.Len)
		}
		for _, b := range c.Writable {
			if _, err := mem.Slice(b.Addr, uint64(b.Len)); err != nil || b.Len == 0 {
				t.Fatalf("writable buffer %+v: %v", b, err)
			}
			w += uint64(b.Len)
		}
		if r != uint64(c.ReadableLen) || w != uint64(c.WritableLen) {
			t.Fatalf("lengths %d/%d, buffers sum to %d/%d", c.ReadableLen, c.WritableLen, r, w)
		}
		if n := len(c.Readable) + len(c.Writable); n > int(cfg.Size) {
			t.Fatalf("%d buffers in a queue of %d", n, cfg.Size)
		}
		got, err := io.ReadAll(c.NewReader(mem))
		if err != nil || len(got) != int(c.ReadableLen) {
			t.Fatalf("read %d of %d: %v", len(got), c.ReadableLen, err)
		}
		wr := c.NewWriter(mem)
		n, err := wr.Write(make([]byte, c.WritableLen+1))
		if n != int(c.WritableLen) || !errors.Is(err, queue.ErrChainFull) {
			t.Fatalf("wrote %d of %d: %v", n, c.WritableLen, err)
		}
	})
}
