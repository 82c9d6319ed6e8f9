package vsock

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/mmio"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

const (
	guestCID = 3
	wait     = 5 * time.Second
)

// guest plays the guest kernel's vsock driver over a Harness.
type guest struct {
	t   *testing.T
	h   *virtiotest.Harness
	dev *Vsock
	uds string
	cid uint64
}

func newGuest(t *testing.T) *guest {
	t.Helper()
	uds := filepath.Join(t.TempDir(), "v.sock")
	dev, err := New(guestCID, uds, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := virtiotest.Start(t, dev, ^uint64(0), 128)
	g := &guest{t: t, h: h, dev: dev, uds: uds, cid: guestCID}
	for range 32 {
		g.postRx()
	}
	g.h.Kick(rxQueue)
	return g
}

func (g *guest) postRx() { g.h.Queues[rxQueue].Post(virtiotest.W(HeaderLen + 4096)) }

// send puts one packet on the tx queue and waits for the device to take it.
func (g *guest) send(h Header, data []byte) {
	g.t.Helper()
	h.SrcCID, h.DstCID, h.Type, h.Len = g.cid, HostCID, TypeStream, uint32(len(data))
	if h.BufAlloc == 0 {
		h.BufAlloc = 1 << 20
	}
	b := make([]byte, HeaderLen)
	h.Encode(b)
	g.h.Post(txQueue, virtiotest.R(b), virtiotest.R(data))
	g.h.Wait(txQueue, wait)
}

// recv returns the next packet the device put on the rx queue.
func (g *guest) recv() (Header, []byte) {
	g.t.Helper()
	h, data, ok := g.tryRecv(wait)
	if !ok {
		g.t.Fatal("no rx packet")
	}
	return h, data
}

func (g *guest) tryRecv(timeout time.Duration) (Header, []byte, bool) {
	g.t.Helper()
	u, ok := g.h.TryWait(rxQueue, timeout)
	if !ok {
		return Header{}, nil, false
	}
	g.postRx()
	g.h.Kick(rxQueue)
	if len(u.Data) < HeaderLen {
		g.t.Fatalf("rx packet of %d bytes", len(u.Data))
	}
	var h Header
	h.Decode(u.Data)
	if h.SrcCID != HostCID || h.DstCID != g.cid || h.Type != TypeStream || int(h.Len) != len(u.Data)-HeaderLen {
		g.t.Fatalf("bad rx header %+v (%d bytes)", h, len(u.Data))
	}
	return h, u.Data[HeaderLen:], true
}

func (g *guest) expect(op uint16) (Header, []byte) {
	g.t.Helper()
	h, d := g.recv()
	if h.Op != op {
		g.t.Fatalf("got op %d (%+v), want %d", h.Op, h, op)
	}
	return h, d
}

// hostRequest does the host side of CONNECT up to the guest's REQUEST; it
// returns the host socket and the REQUEST.
func (g *guest) hostRequest(port uint32) (net.Conn, Header) {
	g.t.Helper()
	c, err := net.Dial("unix", g.uds)
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "CONNECT %d\n", port); err != nil {
		g.t.Fatal(err)
	}
	req, _ := g.expect(OpRequest)
	if req.DstPort != port || req.SrcPort < firstHostPort {
		g.t.Fatalf("REQUEST %+v", req)
	}
	return c, req
}

// hostConnect is hostRequest with the guest's RESPONSE and the host's OK
// line; it returns the host socket and the connection's ports.
func (g *guest) hostConnect(port uint32) (net.Conn, Header) {
	g.t.Helper()
	c, req := g.hostRequest(port)
	g.send(Header{SrcPort: port, DstPort: req.SrcPort, Op: OpResponse}, nil)
	line := readLine(g.t, c)
	if line != fmt.Sprintf("OK %d", req.SrcPort) {
		g.t.Fatalf("handshake reply %q", line)
	}
	return c, req
}

func readLine(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	var line []byte
	var b [1]byte
	for {
		if _, err := c.Read(b[:]); err != nil {
			t.Fatalf("read line: %v (have %q)", err, line)
		}
		if b[0] == '\n' {
			return string(line)
		}
		line = append(line, b[0])
	}
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	var b [16]byte
	n, err := c.Read(b[:])
	if err != io.EOF {
		t.Fatalf("read = %d, %v; want EOF", n, err)
	}
}

// expectClosed is expectEOF that also accepts a reset: closing a socket
// with unread input resets it.
func expectClosed(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(wait))
	var b [16]byte
	n, err := c.Read(b[:])
	if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read = %d, %v; want EOF or ECONNRESET", n, err)
	}
}

func TestConfigCID(t *testing.T) {
	g := newGuest(t)
	if got := g.h.Config(0, 8); got[0] != guestCID || !bytes.Equal(got[1:], make([]byte, 7)) {
		t.Fatalf("guest_cid config %v", got)
	}
	if _, err := New(2, filepath.Join(t.TempDir(), "x"), nil); err == nil {
		t.Fatal("CID 2 accepted")
	}
}

func TestHostConnectAndData(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostConnect(52)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	h, d := g.expect(OpRW)
	if string(d) != "ping" || h.SrcPort != req.SrcPort || h.DstPort != 52 || h.BufAlloc != bufAlloc {
		t.Fatalf("RW %+v %q", h, d)
	}
	g.send(Header{SrcPort: 52, DstPort: req.SrcPort, Op: OpRW}, []byte("pong"))
	if got := readN(t, c, 4); string(got) != "pong" {
		t.Fatalf("host read %q", got)
	}
}

func TestConnectLineInPieces(t *testing.T) {
	g := newGuest(t)
	c, err := net.Dial("unix", g.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("CONN"))
	time.Sleep(50 * time.Millisecond)
	c.Write([]byte("ECT 77\nearly data")) // data right behind the newline
	req, _ := g.expect(OpRequest)
	g.send(Header{SrcPort: 77, DstPort: req.SrcPort, Op: OpResponse}, nil)
	if line := readLine(t, c); line != fmt.Sprintf("OK %d", req.SrcPort) {
		t.Fatalf("reply %q", line)
	}
	_, d := g.expect(OpRW)
	if string(d) != "early data" {
		t.Fatalf("data after the CONNECT line: %q", d)
	}
}

func TestBadConnectLine(t *testing.T) {
	g := newGuest(t)
	for _, line := range []string{"HELLO 5\n", "CONNECT x\n", "CONNECT 99999999999\n", strings.Repeat("C", 100)} {
		c, err := net.Dial("unix", g.uds)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(line))
		expectClosed(t, c)
		c.Close()
	}
	if _, _, ok := g.tryRecv(100 * time.Millisecond); ok {
		t.Fatal("bad handshake reached the guest")
	}
}

func TestHostConnectGuestRefuses(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostRequest(9)
	g.send(Header{SrcPort: 9, DstPort: req.SrcPort, Op: OpRST}, nil)
	expectEOF(t, c)
}

func TestGuestConnect(t *testing.T) {
	g := newGuest(t)
	ln, err := net.Listen("unix", g.uds+"_1234")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	g.send(Header{SrcPort: 5000, DstPort: 1234, Op: OpRequest}, nil)
	resp, _ := g.expect(OpResponse)
	if resp.SrcPort != 1234 || resp.DstPort != 5000 {
		t.Fatalf("RESPONSE %+v", resp)
	}
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g.send(Header{SrcPort: 5000, DstPort: 1234, Op: OpRW}, []byte("hello host"))
	if got := readN(t, c, 10); string(got) != "hello host" {
		t.Fatalf("host got %q", got)
	}
	c.Write([]byte("hello guest"))
	if _, d := g.expect(OpRW); string(d) != "hello guest" {
		t.Fatalf("guest got %q", d)
	}
	// The guest closes: the host sees the data then EOF, the guest gets RST.
	g.send(Header{SrcPort: 5000, DstPort: 1234, Op: OpRW}, []byte("bye"))
	g.send(Header{SrcPort: 5000, DstPort: 1234, Op: OpShutdown, Flags: ShutdownRcv | ShutdownSend}, nil)
	if got := readN(t, c, 3); string(got) != "bye" {
		t.Fatalf("host got %q", got)
	}
	expectEOF(t, c)
	if h, _ := g.expect(OpRST); h.SrcPort != 1234 || h.DstPort != 5000 {
		t.Fatalf("RST %+v", h)
	}
}

func TestGuestConnectNobodyListening(t *testing.T) {
	g := newGuest(t)
	g.send(Header{SrcPort: 6000, DstPort: 999, Op: OpRequest}, nil)
	if h, _ := g.expect(OpRST); h.SrcPort != 999 || h.DstPort != 6000 {
		t.Fatalf("RST %+v", h)
	}
}

func TestRSTForUnknownConnection(t *testing.T) {
	g := newGuest(t)
	for _, op := range []uint16{OpRW, OpShutdown, OpCreditUpdate, OpCreditRequest, OpResponse} {
		g.send(Header{SrcPort: 7000, DstPort: 70, Op: op}, nil)
		if h, _ := g.expect(OpRST); h.SrcPort != 70 || h.DstPort != 7000 {
			t.Fatalf("op %d: RST %+v", op, h)
		}
	}
	// An RST for an unknown connection is not answered.
	g.send(Header{SrcPort: 7000, DstPort: 70, Op: OpRST}, nil)
	if h, _, ok := g.tryRecv(100 * time.Millisecond); ok {
		t.Fatalf("RST answered with %+v", h)
	}
}

func TestMalformedPacketsAreReset(t *testing.T) {
	g := newGuest(t)
	// A header claiming more payload than the chain holds.
	b := make([]byte, HeaderLen)
	(&Header{SrcCID: guestCID, DstCID: HostCID, SrcPort: 1, DstPort: 2, Len: 100, Type: TypeStream, Op: OpRW}).Encode(b)
	g.h.Post(txQueue, virtiotest.R(b), virtiotest.R(make([]byte, 10)))
	g.h.Wait(txQueue, wait)
	if h, _ := g.expect(OpRST); h.SrcPort != 2 || h.DstPort != 1 {
		t.Fatalf("RST %+v", h)
	}
	// A runt packet is dropped; the device carries on.
	g.h.Post(txQueue, virtiotest.R(make([]byte, 10)))
	g.h.Wait(txQueue, wait)
	if g.h.NeedsReset() {
		t.Fatal("malformed packets broke the device")
	}
}

func TestCreditHostToGuest(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostRequest(80)
	// The guest has only 100 bytes of buffer.
	g.send(Header{SrcPort: 80, DstPort: req.SrcPort, Op: OpResponse, BufAlloc: 100}, nil)
	readLine(t, c)
	payload := bytes.Repeat([]byte("0123456789"), 30)
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < 100 {
		_, d := g.expect(OpRW)
		got = append(got, d...)
	}
	if len(got) != 100 {
		t.Fatalf("guest got %d bytes on 100 bytes of credit", len(got))
	}
	if h, _, ok := g.tryRecv(200 * time.Millisecond); ok {
		t.Fatalf("packet beyond credit: %+v", h)
	}
	// The guest consumed everything: 100 more bytes of credit.
	g.send(Header{SrcPort: 80, DstPort: req.SrcPort, Op: OpCreditUpdate, BufAlloc: 100, FwdCnt: 100}, nil)
	for len(got) < 200 {
		_, d := g.expect(OpRW)
		got = append(got, d...)
	}
	if len(got) != 200 || !bytes.Equal(got, payload[:200]) {
		t.Fatalf("guest got %d bytes, want the first 200", len(got))
	}
	if h, _, ok := g.tryRecv(200 * time.Millisecond); ok {
		t.Fatalf("packet beyond credit: %+v", h)
	}
}

func TestCreditGuestToHost(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostConnect(81)
	// CREDIT_REQUEST is answered with our counters.
	g.send(Header{SrcPort: 81, DstPort: req.SrcPort, Op: OpCreditRequest}, nil)
	if h, _ := g.expect(OpCreditUpdate); h.BufAlloc != bufAlloc || h.FwdCnt != 0 {
		t.Fatalf("CREDIT_UPDATE %+v", h)
	}
	// Send more than half our buffer; once the host has read it, the
	// guest hears the new fwd_cnt without asking.
	chunk := bytes.Repeat([]byte{7}, 32<<10)
	total := 0
	for total < bufAlloc/2+1 {
		g.send(Header{SrcPort: 81, DstPort: req.SrcPort, Op: OpRW}, chunk)
		total += len(chunk)
	}
	readN(t, c, total)
	h, _ := g.expect(OpCreditUpdate)
	if h.FwdCnt == 0 || h.FwdCnt > uint32(total) {
		t.Fatalf("CREDIT_UPDATE fwd_cnt %d after %d bytes", h.FwdCnt, total)
	}
}

func TestGuestOverrunIsReset(t *testing.T) {
	g := newGuest(t)
	_, req := g.hostConnect(82)
	// Hold the connection's writer so nothing drains, then overrun.
	g.dev.mu.Lock()
	s := g.dev.sess
	g.dev.mu.Unlock()
	s.mu.Lock()
	cn := s.conns[connKey{local: req.SrcPort, peer: 82}]
	cn.rxCnt = cn.fwdCnt + bufAlloc - 10 // as if the buffer were nearly full
	s.mu.Unlock()
	g.send(Header{SrcPort: 82, DstPort: req.SrcPort, Op: OpRW}, make([]byte, 11))
	if h, _ := g.expect(OpRST); h.DstPort != 82 {
		t.Fatalf("RST %+v", h)
	}
}

func TestHostCloseShutsDownGuest(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostConnect(90)
	c.Write([]byte("last words"))
	c.Close()
	if _, d := g.expect(OpRW); string(d) != "last words" {
		t.Fatalf("data %q", d)
	}
	if h, _ := g.expect(OpShutdown); h.Flags != ShutdownSend {
		t.Fatalf("SHUTDOWN flags %d", h.Flags)
	}
	// The guest closes its end in turn and waits for RST.
	g.send(Header{SrcPort: 90, DstPort: req.SrcPort, Op: OpShutdown, Flags: ShutdownRcv | ShutdownSend}, nil)
	g.expect(OpRST)
	g.dev.mu.Lock()
	n := len(g.dev.sess.conns)
	g.dev.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections left", n)
	}
}

func TestGuestHalfClose(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostConnect(91)
	g.send(Header{SrcPort: 91, DstPort: req.SrcPort, Op: OpRW}, []byte("request"))
	g.send(Header{SrcPort: 91, DstPort: req.SrcPort, Op: OpShutdown, Flags: ShutdownSend}, nil)
	if got := readN(t, c, 7); string(got) != "request" {
		t.Fatalf("host got %q", got)
	}
	expectEOF(t, c) // write side closed...
	c.Write([]byte("response"))
	if _, d := g.expect(OpRW); string(d) != "response" { // ...read side still open
		t.Fatalf("guest got %q", d)
	}
}

func TestGuestRSTClosesHost(t *testing.T) {
	g := newGuest(t)
	c, req := g.hostConnect(92)
	g.send(Header{SrcPort: 92, DstPort: req.SrcPort, Op: OpRST}, nil)
	expectEOF(t, c)
}

func TestManyConnections(t *testing.T) {
	g := newGuest(t)
	const n = 16
	type hc struct {
		c   net.Conn
		req Header
	}
	var conns []hc
	for i := range n {
		c, req := g.hostConnect(uint32(100 + i))
		conns = append(conns, hc{c, req})
	}
	for i, x := range conns {
		fmt.Fprintf(x.c, "from host %d", i)
	}
	seen := map[uint32]string{}
	for len(seen) < n {
		h, d := g.expect(OpRW)
		seen[h.DstPort] += string(d)
		if len(seen[h.DstPort]) < len(fmt.Sprintf("from host %d", h.DstPort-100)) {
			delete(seen, h.DstPort) // partial; wait for the rest
			seen[h.DstPort] = string(d)
		}
	}
	for i, x := range conns {
		if want := fmt.Sprintf("from host %d", i); seen[uint32(100+i)] != want {
			t.Errorf("conn %d: guest got %q", i, seen[uint32(100+i)])
		}
		g.send(Header{SrcPort: uint32(100 + i), DstPort: x.req.SrcPort, Op: OpRW}, []byte(fmt.Sprintf("reply %d", i)))
	}
	for i, x := range conns {
		want := fmt.Sprintf("reply %d", i)
		if got := readN(t, x.c, len(want)); string(got) != want {
			t.Errorf("conn %d: host got %q", i, got)
		}
	}
}

func TestResetDropsConnections(t *testing.T) {
	g := newGuest(t)
	c, _ := g.hostConnect(93)
	g.h.Write32(mmio.RegStatus, 0)
	expectEOF(t, c)
	// Not active: host connections are refused.
	c2, err := net.Dial("unix", g.uds)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "CONNECT 93\n")
	expectEOF(t, c2)
}

func TestCloseRemovesSocket(t *testing.T) {
	uds := filepath.Join(t.TempDir(), "v.sock")
	dev, err := New(guestCID, uds, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", uds) // a handshake in progress
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("unix", uds); err == nil {
		t.Fatal("socket still accepting after Close")
	}
	expectClosed(t, c)
}

// hostStream opens a host connection to the guest's port with credit
// bytes of guest buffer, and has the host write n bytes of a pattern on
// it (in the background); it returns the guest's request and the bytes.
func (g *guest) hostStream(port uint32, credit, n int) (Header, []byte) {
	g.t.Helper()
	c, req := g.hostRequest(port)
	g.send(Header{SrcPort: port, DstPort: req.SrcPort, Op: OpResponse, BufAlloc: uint32(credit)}, nil)
	readLine(g.t, c)
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i / 7)
	}
	go c.Write(want)
	return req, want
}

// TestHostToGuestStreamIntact streams 1 MiB of a counting pattern through
// 4 KiB rx buffers on 64 KiB of guest credit, so the host reader stops
// and refills its two buffers many times: every byte arrives, in order,
// once. The reader hands each buffer to rx without a copy; a refill while
// rx still copies from it would show here as a wrong byte.
func TestHostToGuestStreamIntact(t *testing.T) {
	g := newGuest(t)
	const credit = 64 << 10
	req, want := g.hostStream(90, credit, 1<<20)
	got := make([]byte, 0, len(want))
	announced := 0
	for len(got) < len(want) {
		_, d := g.expect(OpRW)
		got = append(got, d...)
		if len(got)-announced >= credit/2 {
			announced = len(got)
			g.send(Header{SrcPort: 90, DstPort: req.SrcPort, Op: OpCreditUpdate, BufAlloc: credit, FwdCnt: uint32(announced)}, nil)
		}
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("stream differs at byte %d of %d", i, len(want))
	}
}

// The host reader reads its next chunk while the guest has yet to take
// the last (toGuest), so a host-to-guest stream never waits for the
// guest's copy before its next read: with the guest's rx buffers all
// full, the connection holds one chunk in toGuest and one read ahead, and
// no more; once the guest takes them the stream arrives whole.
func TestHostReaderReadsAhead(t *testing.T) {
	g := newGuest(t)
	_, want := g.hostStream(91, 1<<20, 6*MaxPayload)
	// 32 rx buffers of 4 KiB take two chunks; the third waits in
	// toGuest and the fourth is read ahead.
	var toGuest, ahead int
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		g.dev.sess.mu.Lock()
		for _, cn := range g.dev.sess.conns {
			toGuest, ahead = len(cn.toGuest), len(cn.ahead)
		}
		g.dev.sess.mu.Unlock()
		if toGuest > 0 && ahead > 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if toGuest == 0 || ahead == 0 {
		t.Fatalf("with the rx queue full: toGuest %d bytes, read ahead %d; want both held", toGuest, ahead)
	}
	time.Sleep(50 * time.Millisecond)
	g.dev.sess.mu.Lock()
	for _, cn := range g.dev.sess.conns {
		if len(cn.toGuest)+len(cn.ahead) > 2*MaxPayload {
			t.Errorf("the reader holds %d bytes for the guest, more than two chunks", len(cn.toGuest)+len(cn.ahead))
		}
	}
	g.dev.sess.mu.Unlock()
	got := make([]byte, 0, len(want))
	for len(got) < len(want) {
		_, d := g.expect(OpRW)
		got = append(got, d...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the stream read ahead arrived out of order or damaged")
	}
}
