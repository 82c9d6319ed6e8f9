package net_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/cellvm/cellvm/netpolicy"
	vnet "github.com/cellvm/cellvm/virtio/net"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// TestRealTAPARP sends an ARP request for the host's end of a real TAP
// through the device and expects the host's ARP reply back in an rx
// buffer: the whole path a guest's first packet takes.
func TestRealTAPARP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a TAP")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("no /dev/net/tun")
	}
	const name = "cvtestarp0"
	if err := exec.Command("ip", "tuntap", "add", "dev", name, "mode", "tap", "vnet_hdr").Run(); err != nil {
		t.Skipf("cannot create a TAP: %v", err)
	}
	defer exec.Command("ip", "link", "del", name).Run()
	exec.Command("ip", "addr", "add", "10.98.0.1/30", "dev", name).Run()
	exec.Command("ip", "link", "set", name, "up").Run()
	tap, err := netpolicy.OpenTAP(name)
	if err != nil {
		t.Fatal(err)
	}
	mac := [6]byte{2, 0, 0, 0, 0, 2}
	h := virtiotest.Start(t, vnet.New(tap, mac, nil), ^uint64(0), 64)
	for i := 0; i < 16; i++ {
		h.Post(vnet.RxQueue, virtiotest.W(vnet.HeaderLen+1514))
	}
	// Let the device's reader find the TAP empty first: the frame must
	// wake it through the poller, as in a guest that sends a while after
	// boot.
	time.Sleep(300 * time.Millisecond)
	arp := make([]byte, vnet.HeaderLen)
	arp = append(arp, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	arp = append(arp, mac[:]...)
	arp = append(arp, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1)
	arp = append(arp, mac[:]...)
	arp = append(arp, 10, 98, 0, 2, 0, 0, 0, 0, 0, 0, 10, 98, 0, 1)
	h.Post(vnet.TxQueue, virtiotest.R(arp))
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		u, ok := h.TryWait(vnet.RxQueue, time.Second)
		if !ok {
			continue
		}
		if len(u.Data) >= vnet.HeaderLen+42 && u.Data[vnet.HeaderLen+12] == 0x08 && u.Data[vnet.HeaderLen+13] == 0x06 && u.Data[vnet.HeaderLen+21] == 2 {
			return // the ARP reply
		}
	}
	t.Fatal("no ARP reply reached the rx queue")
}
