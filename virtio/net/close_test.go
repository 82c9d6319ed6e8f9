package net

import (
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// fakeTAPFile is a packet socket pair standing in for a TAP: the device
// gets one end as a non-blocking *os.File, as netpolicy.OpenTAP returns it, and the
// test plays the host network on the other.
func fakeTAPFile(t *testing.T) (dev *os.File, peer int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	return os.NewFile(uintptr(fds[0]), "fake-tap"), fds[1]
}

// TestTeardownClosesTheTAPOnce tears down a running device the way a
// machine with a TAP used to: its transport closed it (from several
// goroutines here), and then the machine closed it again. No panic, no
// race (run with -race), and the TAP is closed exactly once, so the host
// side sees its end.
func TestTeardownClosesTheTAPOnce(t *testing.T) {
	tapFile, peer := fakeTAPFile(t)
	n := New(tapFile, [6]byte{2}, nil)
	h := virtiotest.Start(t, n, ^uint64(0), 64)
	// Traffic both ways, so the reader and both queue goroutines run.
	if _, err := unix.Write(peer, frame("to guest")); err != nil {
		t.Fatal(err)
	}
	h.Post(rxQueue, virtiotest.W(HeaderLen+1514))
	h.Wait(rxQueue, 5*time.Second)
	h.Post(txQueue, virtiotest.R(frame("from guest")))
	h.Wait(txQueue, 5*time.Second)
	buf := make([]byte, 64)
	if k, err := unix.Read(peer, buf); err != nil || string(buf[HeaderLen:k]) != "from guest" {
		t.Fatalf("host side got %q, %v", buf[:max(k, 0)], err)
	}

	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); h.MMIO.Close() }()
	}
	wg.Wait()
	for i := 0; i < 2; i++ {
		if err := n.Close(); err != nil {
			t.Errorf("Close after the transport closed the device: %v, want the first Close's result (nil)", err)
		}
	}
	if k, err := unix.Read(peer, buf); k != 0 || err != nil {
		t.Errorf("peer read %d bytes, %v after teardown; want end of file", k, err)
	}
}
