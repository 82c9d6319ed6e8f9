package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// postEvents gives the device n event buffers, as Linux's driver does at
// probe (struct virtio_vsock_event is 4 bytes).
func (g *guest) postEvents(n int) {
	for range n {
		g.h.Queues[evQueue].Post(virtiotest.W(4))
	}
	g.h.Kick(evQueue)
}

// handleReset takes the transport reset event off the event queue and does
// what Linux's driver does with it: refill the queue and kick it.
func (g *guest) handleReset() {
	g.t.Helper()
	u := g.h.Wait(evQueue, wait)
	if u.Len != 4 || binary.LittleEndian.Uint32(u.Data) != EventTransportReset {
		g.t.Fatalf("event %+v, want TRANSPORT_RESET", u)
	}
	g.postEvents(1)
}

// resetLive gives the device two event buffers and resets the transport
// of the running device, as a snapshot of a VM that carries on does.
func (g *guest) resetLive() {
	g.t.Helper()
	g.postEvents(2)
	if err := g.h.MMIO.Pause(); err != nil {
		g.t.Fatal(err)
	}
	if err := g.dev.TransportReset(); err != nil {
		g.t.Fatal(err)
	}
	g.h.MMIO.Resume()
}

// hostConnectPending asks the device for a connection to guest port from
// the host side, and leaves it waiting for the guest (closed at the end).
func (g *guest) hostConnectPending(port uint32) {
	g.t.Helper()
	hc, err := net.Dial("unix", g.uds)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { hc.Close() })
	fmt.Fprintf(hc, "CONNECT %d\n", port)
}

// noRx checks that nothing reaches the guest's rx queue for a while.
func (g *guest) noRx(why string) {
	g.t.Helper()
	if h, _, ok := g.tryRecv(200 * time.Millisecond); ok {
		g.t.Fatalf("%s: rx packet %+v", why, h)
	}
}

// TestSnapshotResetsConnections: a snapshot resets the transport. The
// connection open at the time is closed on the host and the guest gets the
// event; the restored device, on its own socket and with its own CID,
// delivers nothing until the guest has handled the event, then takes new
// connections. The original, resumed, does the same.
func TestSnapshotResetsConnections(t *testing.T) {
	g := newGuest(t)
	g.postEvents(4)
	c, _ := g.hostConnect(52)

	if err := g.h.MMIO.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := g.dev.TransportReset(); err != nil {
		t.Fatal(err)
	}
	expectEOF(t, c)
	saved := g.dev.Save()
	if !saved.ResetPending || saved.CID != guestCID || saved.NextPort <= firstHostPort {
		t.Fatalf("saved %+v", saved)
	}
	st, mem := g.h.Snapshot()

	uds2 := filepath.Join(t.TempDir(), "fork.sock")
	dev2, err := New(guestCID+1, uds2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := dev2.Restore(saved); err != nil {
		t.Fatal(err)
	}
	fork := &guest{t: t, h: g.h.Restore(dev2, st, mem), dev: dev2, uds: uds2, cid: guestCID + 1}
	if got := binary.LittleEndian.Uint64(fork.h.Config(0, 8)); got != guestCID+1 {
		t.Fatalf("the fork's guest_cid is %d", got)
	}

	// A host connection before the guest handled the reset waits.
	hc, err := net.Dial("unix", uds2)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	fmt.Fprintf(hc, "CONNECT %d\n", 52)
	fork.noRx("before the guest handled the reset")
	fork.handleReset()
	req, _ := fork.expect(OpRequest)
	if req.DstPort != 52 || req.SrcPort != saved.NextPort {
		t.Fatalf("REQUEST %+v, want from the saved next port %d", req, saved.NextPort)
	}
	// The fork's guest has the new CID now.
	fork.send(Header{SrcPort: 52, DstPort: req.SrcPort, Op: OpResponse}, nil)
	if line := readLine(t, hc); line != fmt.Sprintf("OK %d", req.SrcPort) {
		t.Fatalf("handshake reply %q", line)
	}

	// The original carries on the same way.
	g.h.MMIO.Resume()
	g.handleReset()
	g.hostConnect(53)
}

// TestResetGateIgnoresSpuriousKicks: a kick of the event queue that adds no
// buffer (the restored transport kicks every queue) does not open rx.
func TestResetGateIgnoresSpuriousKicks(t *testing.T) {
	g := newGuest(t)
	g.resetLive()
	g.hostConnectPending(9)
	g.h.Kick(evQueue)
	g.noRx("after a kick with no new event buffer")
	g.handleReset()
	g.expect(OpRequest)
}

// TestResetRefillWithoutKickOpensRx: a guest that handled the reset and
// refilled the event queue without a notification reaching the device (a
// kick made while a restored device was not yet running) still gets its
// rx: the device looks at the queue itself while a reset is pending.
func TestResetRefillWithoutKickOpensRx(t *testing.T) {
	g := newGuest(t)
	g.resetLive()
	g.hostConnectPending(9)
	g.h.Wait(evQueue, wait)
	g.h.Queues[evQueue].Post(virtiotest.W(4)) // refilled, never kicked
	g.expect(OpRequest)
}

// TestPendingResetRaisesItsInterruptAgain: while the guest has not
// handled a reset, the device raises its interrupt again (a guest whose
// reset interrupt was lost in a save would otherwise never look).
func TestPendingResetRaisesItsInterruptAgain(t *testing.T) {
	g := newGuest(t)
	g.resetLive()
	g.h.WaitIrq(wait) // the reset's own interrupt
	start := time.Now()
	if !g.h.WaitIrq(resetNudge + 2*time.Second) {
		t.Fatalf("no interrupt raised again within %v of a pending reset", resetNudge+2*time.Second)
	}
	if d := time.Since(start); d < resetNudge/2 {
		t.Errorf("raised again after %v, before the %v the guest is given", d, resetNudge)
	}
	g.handleReset()
	g.h.WaitIrq(100 * time.Millisecond) // drain one raised meanwhile
	if g.h.WaitIrq(resetNudge + time.Second) {
		t.Error("an interrupt raised again after the guest handled the reset")
	}
}

func TestTransportResetWithoutEventBuffer(t *testing.T) {
	g := newGuest(t)
	if err := g.h.MMIO.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := g.dev.TransportReset(); !errors.Is(err, ErrNoEventBuffer) {
		t.Fatalf("TransportReset with no event buffer: %v, want ErrNoEventBuffer", err)
	}
	if g.dev.Save().ResetPending {
		t.Fatal("rx held back for an event the guest never got")
	}
	g.h.MMIO.Resume()
	g.hostConnect(52) // rx is not held back
}

func TestRestoreRefusesBadState(t *testing.T) {
	g := newGuest(t)
	if err := g.dev.Restore(State{NextPort: firstHostPort}); err == nil {
		t.Error("restore into an active device succeeded")
	}
	dev, err := New(guestCID, filepath.Join(t.TempDir(), "x.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := dev.Restore(State{NextPort: 5}); err == nil {
		t.Error("restore with a host port in the guest's range succeeded")
	}
}
