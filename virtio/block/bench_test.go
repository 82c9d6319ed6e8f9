package block_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/block"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// BenchmarkSequentialRead reads a warm 16 MiB file as Linux's readahead
// does: 128 KiB requests, each of 32 separate 4 KiB guest pages, with depth
// requests in flight, over a byte-slice guest memory. Its MB/s is the host
// side's cost per byte; the rig's `make bench -only disk` is the guest's.
func BenchmarkSequentialRead(b *testing.B) {
	for _, depth := range []int{1, 6} {
		b.Run(fmt.Sprintf("depth%d", depth), func(b *testing.B) { benchRead(b, depth) })
	}
}

func benchRead(b *testing.B, depth int) {
	const (
		fileSize = 16 << 20
		pages    = 32
		reqBytes = pages * 4096
	)
	path := filepath.Join(b.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, fileSize), 0o600); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	dev, err := block.New(f, true, "bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	h := virtiotest.Start(b, dev, ^uint64(0), 256)
	d := h.Queues[0]
	// One set of buffers per slot in flight, posted again and again.
	slots := make([][]virtiotest.Buf, depth)
	for i := range slots {
		hdr := virtiotest.Buf{Addr: h.Heap.Alloc(16, 8), Len: 16}
		s := []virtiotest.Buf{hdr}
		for range pages {
			s = append(s, virtiotest.Buf{Addr: h.Heap.Alloc(4096, 4096), Len: 4096, Write: true})
		}
		slots[i] = append(s, virtiotest.Buf{Addr: h.Heap.Alloc(1, 1), Len: 1, Write: true})
	}
	slotOf := map[uint16]int{}
	next := uint64(0)
	post := func(slot int) {
		var hdr [16]byte
		binary.LittleEndian.PutUint32(hdr[0:], block.TypeIn)
		binary.LittleEndian.PutUint64(hdr[8:], next)
		next = (next + reqBytes/block.SectorSize) % (fileSize / block.SectorSize)
		if err := h.Mem.WriteAt(hdr[:], slots[slot][0].Addr); err != nil {
			b.Fatal(err)
		}
		slotOf[d.PostBufs(slots[slot]...)] = slot
	}
	b.SetBytes(reqBytes)
	b.ResetTimer()
	posted, done := 0, 0
	for ; posted < min(depth, b.N); posted++ {
		post(posted)
	}
	h.Kick(0)
	for done < b.N {
		id, n, ok := d.Reclaim()
		if !ok {
			if !h.WaitIrq(5 * time.Second) {
				b.Fatalf("no interrupt after %d of %d requests", done, b.N)
			}
			continue
		}
		if n != reqBytes+1 {
			b.Fatalf("request wrote %d bytes", n)
		}
		done++
		slot := slotOf[id]
		delete(slotOf, id)
		if posted < b.N {
			post(slot)
			posted++
			h.Kick(0)
		}
	}
}
