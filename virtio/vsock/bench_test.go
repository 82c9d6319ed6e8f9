package vsock

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// BenchmarkHostToGuest streams from a host socket to a guest that posts
// 4 KiB rx buffers, as Linux's driver does, and announces its credit
// (buf_alloc 256 KiB) every 64 KiB it consumes, over a byte-slice guest
// memory. Its MB/s is the device's host-side cost per byte; the rig's
// `make bench -only vsock` is the guest's.
func BenchmarkHostToGuest(b *testing.B) {
	const (
		chunk    = 64 << 10
		rxBuf    = HeaderLen + 4096
		guestBuf = 256 << 10
		port     = 52
	)
	uds := filepath.Join(b.TempDir(), "v.sock")
	dev, err := New(guestCID, uds, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := virtiotest.Start(b, dev, ^uint64(0), 256)
	rx, tx := h.Queues[rxQueue], h.Queues[txQueue]
	addrOf := map[uint16]uint64{}
	postRx := func(addr uint64) { addrOf[rx.PostBufs(virtiotest.Buf{Addr: addr, Len: rxBuf, Write: true})] = addr }
	for range 200 {
		postRx(h.Heap.Alloc(rxBuf, 8))
	}
	h.Kick(rxQueue)
	txHdr := h.Heap.Alloc(HeaderLen, 8)
	var local uint32
	txOut := false // the one header buffer is on tx, not yet taken
	// send posts a header on tx, once the device has taken the last one
	// (rewriting the buffer before would race the device's read of it).
	send := func(op uint16, fwd uint32) {
		for deadline := time.Now().Add(5 * time.Second); txOut; {
			if _, _, ok := tx.Reclaim(); ok {
				txOut = false
			} else if time.Now().After(deadline) {
				b.Fatal("the device did not take a tx header")
			} else {
				time.Sleep(10 * time.Microsecond)
			}
		}
		txOut = true
		hd := Header{SrcCID: guestCID, DstCID: HostCID, SrcPort: port, DstPort: local, Type: TypeStream, Op: op, BufAlloc: guestBuf, FwdCnt: fwd}
		var raw [HeaderLen]byte
		hd.Encode(raw[:])
		if err := h.Mem.WriteAt(raw[:], txHdr); err != nil {
			b.Fatal(err)
		}
		tx.PostBufs(virtiotest.Buf{Addr: txHdr, Len: HeaderLen})
		h.Kick(txQueue)
	}
	// recv takes the next rx packet's header and posts its buffer again.
	recv := func() Header {
		for {
			id, _, ok := rx.Reclaim()
			if !ok {
				if !h.WaitIrq(5 * time.Second) {
					b.Fatal("no rx interrupt")
				}
				continue
			}
			var raw [HeaderLen]byte
			if err := h.Mem.ReadAt(raw[:], addrOf[id]); err != nil {
				b.Fatal(err)
			}
			postRx(addrOf[id])
			h.Kick(rxQueue)
			var hd Header
			hd.Decode(raw[:])
			return hd
		}
	}

	c, err := net.Dial("unix", uds)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %d\n", port)
	req := recv()
	if req.Op != OpRequest {
		b.Fatalf("got op %d, want REQUEST", req.Op)
	}
	local = req.SrcPort
	send(OpResponse, 0)
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		b.Fatal(err)
	}

	b.SetBytes(chunk)
	b.ResetTimer()
	go func() {
		buf := make([]byte, chunk)
		for range b.N {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	var got, announced uint32
	for int64(got) < int64(b.N)*chunk {
		hd := recv()
		if hd.Op != OpRW {
			continue
		}
		got += hd.Len
		if got-announced >= guestBuf/4 {
			send(OpCreditUpdate, got)
			announced = got
		}
	}
}
