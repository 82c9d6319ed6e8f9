package net

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// fakeTAP hands the device frames from toGuest and collects what it writes.
type fakeTAP struct {
	toGuest chan []byte
	fromDev chan []byte
	closed  chan struct{}
}

func newFakeTAP() *fakeTAP {
	return &fakeTAP{toGuest: make(chan []byte, 8), fromDev: make(chan []byte, 8), closed: make(chan struct{})}
}

func (f *fakeTAP) Read(p []byte) (int, error) {
	select {
	case b := <-f.toGuest:
		return copy(p, b), nil
	case <-f.closed:
		return 0, io.EOF
	}
}

func (f *fakeTAP) Write(p []byte) (int, error) {
	f.fromDev <- append([]byte(nil), p...)
	return len(p), nil
}

func (f *fakeTAP) Close() error { close(f.closed); return nil }

func frame(payload string) []byte {
	return append(make([]byte, HeaderLen), payload...)
}

func TestMACConfig(t *testing.T) {
	h := virtiotest.Start(t, New(newFakeTAP(), [6]byte{2, 0, 0, 0, 0, 7}, nil), ^uint64(0), 64)
	var got []byte
	for i := range uint64(6) { // Linux reads the MAC a byte at a time
		got = append(got, h.Config(i, 1)...)
	}
	if !bytes.Equal(got, []byte{2, 0, 0, 0, 0, 7}) {
		t.Fatalf("mac %x", got)
	}
	if h.Features&FeatureMAC == 0 {
		t.Fatal("MAC feature not offered")
	}
}

func TestTransmit(t *testing.T) {
	tap := newFakeTAP()
	h := virtiotest.Start(t, New(tap, [6]byte{2}, nil), ^uint64(0), 64)
	f := frame("ethernet frame")
	h.Post(txQueue, virtiotest.R(f[:HeaderLen]), virtiotest.R(f[HeaderLen:]))
	select {
	case got := <-tap.fromDev:
		if !bytes.Equal(got, f) {
			t.Fatalf("TAP got %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing written to the TAP")
	}
	h.Wait(txQueue, 5*time.Second)
	// A runt (shorter than the header) is dropped but completed.
	h.Post(txQueue, virtiotest.R([]byte{1, 2}))
	h.Wait(txQueue, 5*time.Second)
	select {
	case got := <-tap.fromDev:
		t.Fatalf("runt reached the TAP: %q", got)
	default:
	}
}

func TestReceive(t *testing.T) {
	tap := newFakeTAP()
	h := virtiotest.Start(t, New(tap, [6]byte{2}, nil), ^uint64(0), 64)
	big := frame(string(make([]byte, 3000)))
	tap.toGuest <- big // larger than the buffer below: dropped
	tap.toGuest <- frame("hello guest")
	h.Post(rxQueue, virtiotest.W(HeaderLen+1514))
	u := h.Wait(rxQueue, 5*time.Second)
	want := frame("hello guest")
	want[10] = 1 // num_buffers
	if !bytes.Equal(u.Data, want) {
		t.Fatalf("guest got %q", u.Data)
	}
	// A frame waits for a buffer.
	tap.toGuest <- frame("later")
	if _, ok := h.TryWait(rxQueue, 100*time.Millisecond); ok {
		t.Fatal("used entry without a posted buffer")
	}
	h.Post(rxQueue, virtiotest.W(HeaderLen+1514))
	if u := h.Wait(rxQueue, 5*time.Second); string(u.Data[HeaderLen:]) != "later" {
		t.Fatalf("guest got %q", u.Data)
	}
}

// TestTransmitZeroesHeader: a guest that fills the virtio_net_hdr with
// offload fields never negotiated (checksum, TCP segmentation) gets them
// zeroed before the TAP, and the frame itself unchanged.
func TestTransmitZeroesHeader(t *testing.T) {
	tap := newFakeTAP()
	h := virtiotest.Start(t, New(tap, [6]byte{2}, nil), ^uint64(0), 64)
	f := frame("a TCP segment the guest wants the host to split")
	copy(f, []byte{
		0x01,       // flags: VIRTIO_NET_HDR_F_NEEDS_CSUM
		0x81,       // gso_type: VIRTIO_NET_HDR_GSO_TCPV4 | ECN
		0x36, 0x00, // hdr_len 54
		0xa8, 0x05, // gso_size 1448
		0x22, 0x00, // csum_start 34
		0x10, 0x00, // csum_offset 16
		0x07, 0x00, // num_buffers 7
	})
	// The header split across descriptors, as a guest may post it.
	h.Post(txQueue, virtiotest.R(f[:5]), virtiotest.R(f[5:HeaderLen+3]), virtiotest.R(f[HeaderLen+3:]))
	select {
	case got := <-tap.fromDev:
		if !bytes.Equal(got[:HeaderLen], make([]byte, HeaderLen)) {
			t.Errorf("TAP got header % x, want zeroes", got[:HeaderLen])
		}
		if !bytes.Equal(got[HeaderLen:], f[HeaderLen:]) {
			t.Errorf("TAP got frame %q, want %q", got[HeaderLen:], f[HeaderLen:])
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing written to the TAP")
	}
	h.Wait(txQueue, 5*time.Second)
}
