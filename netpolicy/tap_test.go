package netpolicy

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	vnet "github.com/cellvm/cellvm/virtio/net"
)

func TestOpenTAP(t *testing.T) {
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	f, err := OpenTAP("cvtest%d")
	if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EPERM) {
		t.Skipf("cannot create a TAP here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Close must interrupt a pending read (the device's TAP reader).
	done := make(chan error, 1)
	go func() {
		_, err := f.Read(make([]byte, vnet.MaxFrame))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt Read")
	}
}
