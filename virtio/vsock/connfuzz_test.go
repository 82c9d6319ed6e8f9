package vsock

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// Host ports of FuzzConnections' world: a listener that echoes, one that
// hangs up at once, and none.
const (
	fuzzEchoPort   = 5000
	fuzzHangupPort = 5001
	fuzzNobodyPort = 5002
	fuzzMaxHost    = 8  // host sockets open at once
	fuzzMaxRx      = 24 // rx buffers posted at once
)

// FuzzConnections runs the vsock device's connection state machine with
// guest packets and host socket events interleaved, four input bytes per
// step (kind and three parameters): the guest sends any op on any of a few
// port pairs with any flags, credit and payload, posts rx buffers of
// several sizes and takes what the device put there; the host connects
// (with good and bad CONNECT lines), writes, half-closes, closes and
// reads. Whatever the order, the device must not panic, its connection
// table, pending RSTs and per-connection buffers stay within their bounds
// at every step, and after Close every goroutine it started is gone.
func FuzzConnections(f *testing.F) {
	for _, s := range connSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) { runConnOps(t, data) })
}

// connWorld is one run: the device behind a transport, the host's
// listeners and sockets.
type connWorld struct {
	t     *testing.T
	dev   *Vsock
	h     *virtiotest.Harness
	uds   string
	lns   []net.Listener
	host  []net.Conn
	rx    int            // rx buffers posted and not yet taken back
	taken map[uint16]int // rx packets the guest took, by op
	// waited is the time the run's steps have spent waiting for the
	// device; past fuzzWaitBudget they stop waiting, so that no input
	// (thousands of wait steps) outlasts the fuzzer's patience with a
	// worker, and a slow input is not mistaken for a hung device.
	waited time.Duration
}

// fuzzWaitBudget bounds the waiting of one run's steps.
const fuzzWaitBudget = 2 * time.Second

func runConnOps(t *testing.T, data []byte) *connWorld {
	base := runtime.NumGoroutine()
	dir, err := os.MkdirTemp("", "vf")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	w := &connWorld{t: t, uds: filepath.Join(dir, "v"), taken: map[uint16]int{}}
	w.dev, err = New(guestCID, w.uds, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.h = virtiotest.Start(t, w.dev, ^uint64(0), 64)
	w.listen(fuzzEchoPort, func(c net.Conn) { io.Copy(c, c); c.Close() })
	w.listen(fuzzHangupPort, func(c net.Conn) { c.Close() })
	for range 8 {
		w.postRx(0)
	}
	for len(data) >= 4 {
		op := data[:4]
		data = data[4:]
		if !w.step(op[0], op[1], op[2], op[3]) {
			break
		}
		w.checkBounds()
	}
	w.teardown(base)
	return w
}

func (w *connWorld) listen(port uint32, serve func(net.Conn)) {
	ln, err := net.Listen("unix", fmt.Sprintf("%s_%d", w.uds, port))
	if err != nil {
		w.t.Fatal(err)
	}
	w.lns = append(w.lns, ln)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
}

// step does one operation; it reports whether the run goes on (not once
// the device has marked itself broken: a driver would reset it).
func (w *connWorld) step(kind, a, b, c byte) bool {
	switch kind % 8 {
	case 0, 1: // the guest sends a packet (the most common step)
		return w.guestPacket(a, b, c)
	case 2:
		w.postRx(a)
	case 3:
		w.takeRx()
	case 4:
		w.hostConnect(a, b)
	case 5:
		if len(w.host) > 0 {
			conn := w.host[int(a)%len(w.host)]
			conn.SetWriteDeadline(time.Now().Add(5 * time.Millisecond))
			conn.Write(bytes.Repeat([]byte{b}, int(c)*16))
		}
	case 6:
		if len(w.host) > 0 {
			i := int(a) % len(w.host)
			if b%2 == 0 {
				w.host[i].(*net.UnixConn).CloseWrite()
			} else {
				w.host[i].Close()
				w.host = append(w.host[:i], w.host[i+1:]...)
			}
		}
	case 7:
		if b%4 == 3 { // the guest waits (a little) for a packet
			wait := min(100*time.Millisecond, fuzzWaitBudget-w.waited)
			if wait <= 0 {
				break
			}
			start := time.Now()
			if u, ok := w.h.TryWait(rxQueue, wait); ok {
				w.rx--
				w.record(u)
			}
			w.waited += time.Since(start)
			break
		}
		if len(w.host) > 0 {
			conn := w.host[int(a)%len(w.host)]
			conn.SetReadDeadline(time.Now().Add(time.Millisecond))
			conn.Read(make([]byte, 4096))
		}
		if w.waited < fuzzWaitBudget {
			d := time.Duration(b%4) * time.Millisecond
			time.Sleep(d) // let the device's goroutines run
			w.waited += d
		}
	}
	return !w.h.NeedsReset()
}

var fuzzOps = []uint16{OpRequest, OpResponse, OpRST, OpShutdown, OpRW, OpCreditUpdate, OpCreditRequest, 99}

func (w *connWorld) guestPacket(a, b, c byte) bool {
	h := Header{SrcCID: guestCID, DstCID: HostCID, Type: TypeStream, Op: fuzzOps[a%8], SrcPort: 1000 + uint32(a>>4&3)}
	switch b % 4 {
	case 0:
		h.DstPort = fuzzEchoPort
	case 1:
		h.DstPort = fuzzHangupPort
	case 2:
		h.DstPort = fuzzNobodyPort
	default:
		h.DstPort = firstHostPort + uint32(b>>2&3)
	}
	h.Flags = uint32(c & 3)
	if c&4 == 0 {
		h.BufAlloc = 64 << 10
	}
	h.FwdCnt = uint32(a>>6) << 12 // mostly 0: a fwd_cnt past what was sent leaves no credit
	switch c >> 6 {
	case 1:
		h.Type = 2 // SEQPACKET: not offered
	case 2:
		h.DstCID = 77 // not the host
	}
	var payload []byte
	if h.Op == OpRW {
		payload = bytes.Repeat([]byte{b}, int(c&0x3f)*8)
	}
	h.Len = uint32(len(payload))
	hb := make([]byte, HeaderLen)
	h.Encode(hb)
	if c&0x38 == 0x38 { // a chain too short for its header
		hb = hb[:HeaderLen-1]
	}
	segs := []virtiotest.Seg{virtiotest.R(hb)}
	if len(payload) > 0 {
		segs = append(segs, virtiotest.R(payload))
	}
	w.h.Post(txQueue, segs...)
	_, ok := w.h.TryWait(txQueue, 5*time.Second)
	if !ok && !w.h.NeedsReset() {
		w.t.Fatalf("the device did not take a tx packet (%+v)", h)
	}
	return ok
}

func (w *connWorld) postRx(a byte) {
	if w.rx >= fuzzMaxRx {
		return
	}
	size := []uint32{HeaderLen + 4096, HeaderLen + 64, HeaderLen, 8}[a%4]
	w.h.Queues[rxQueue].Post(virtiotest.W(size))
	w.rx++
	w.h.Kick(rxQueue)
}

func (w *connWorld) takeRx() {
	for {
		u, ok := w.h.Queues[rxQueue].Next()
		if !ok {
			return
		}
		w.rx--
		w.record(u)
	}
}

// record checks and counts one rx packet the guest took.
func (w *connWorld) record(u virtiotest.Used) {
	if len(u.Data) == 0 {
		return
	}
	if len(u.Data) < HeaderLen {
		w.t.Fatalf("the device wrote a packet of %d bytes, shorter than a header", len(u.Data))
	}
	var h Header
	h.Decode(u.Data)
	if int(h.Len) != len(u.Data)-HeaderLen {
		w.t.Fatalf("rx packet %+v with %d payload bytes", h, len(u.Data)-HeaderLen)
	}
	w.taken[h.Op]++
}

func (w *connWorld) hostConnect(a, b byte) {
	if len(w.host) >= fuzzMaxHost {
		return
	}
	c, err := net.Dial("unix", w.uds)
	if err != nil {
		w.t.Fatalf("host connect: %v", err)
	}
	w.host = append(w.host, c)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	switch b % 4 {
	case 0, 1:
		fmt.Fprintf(c, "CONNECT %d\n", 1000+uint32(a&3))
	case 2:
		c.Write([]byte("CONNECT " + strings.Repeat("9", int(a%80)) + "\n"))
	default:
		c.Write([]byte{a, b, '\n'})
	}
}

// checkBounds checks the device's state against its bounds.
func (w *connWorld) checkBounds() {
	w.dev.mu.Lock()
	s := w.dev.sess
	w.dev.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) > maxConns || len(s.rsts) > maxPendingRST {
		w.t.Fatalf("%d connections (max %d), %d pending RSTs (max %d)", len(s.conns), maxConns, len(s.rsts), maxPendingRST)
	}
	seen := map[*conn]bool{}
	for _, c := range s.ready {
		if seen[c] {
			w.t.Fatalf("connection %+v is queued twice", c.key)
		}
		seen[c] = true
		if !c.state.killed() && s.conns[c.key] != c {
			w.t.Fatalf("queued connection %+v is neither live nor closed", c.key)
		}
	}
	for _, c := range s.conns {
		if len(c.toHost) > bufAlloc || len(c.toGuest) > MaxPayload {
			w.t.Fatalf("connection %+v buffers %d bytes for the host (max %d) and %d for the guest (max %d)",
				c.key, len(c.toHost), bufAlloc, len(c.toGuest), MaxPayload)
		}
	}
}

// teardown closes everything and checks that the device's goroutines are
// gone.
func (w *connWorld) teardown(base int) {
	for _, c := range w.host {
		c.Close()
	}
	for _, ln := range w.lns {
		ln.Close()
	}
	if err := w.h.MMIO.Close(); err != nil {
		w.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > base; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			w.t.Fatalf("%d goroutines after Close, %d before the run:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
	}
}

// connSeeds are complete conversations: the guest connects to the echo
// listener, sends data and closes; the host connects and the guest
// accepts, then data both ways; a guest connect nobody answers; a
// credit-overrunning guest.
func connSeeds() [][]byte {
	op := func(kind, a, b, c byte) []byte { return []byte{kind, a, b, c} }
	cat := func(ops ...[]byte) []byte { return bytes.Join(ops, nil) }
	rw := func(n byte) []byte { return op(0, 4, 0, n&0x3f) } // RW to the echo port, n*8 bytes
	return [][]byte{
		cat(op(0, 0, 0, 0), op(7, 0, 3, 0), rw(8), op(7, 0, 3, 0), op(7, 0, 3, 0), op(0, 3, 0, 3), op(7, 0, 3, 0), op(3, 0, 0, 0)),
		cat(op(4, 0, 0, 0), op(7, 0, 3, 0), op(0, 1, 3, 0), op(5, 0, 'x', 4), op(7, 0, 3, 0), op(3, 0, 0, 0), op(0, 4, 3, 9), op(7, 0, 0, 0), op(6, 0, 0, 0), op(0, 2, 3, 0)),
		cat(op(0, 0, 2, 0), op(0, 0, 1, 0), op(7, 0, 3, 0), op(3, 0, 0, 0), op(2, 3, 0, 0), op(2, 2, 0, 0)),
		cat(op(0, 0, 0, 4), op(7, 0, 2, 0), rw(63), rw(63), rw(63), op(0, 6, 0, 0), op(3, 0, 0, 0), op(0, 7, 0, 0xff)),
		cat(op(4, 0, 2, 0), op(4, 1, 3, 0), op(4, 2, 0, 0), op(7, 0, 3, 0), op(0, 1, 3, 0), op(0, 1, 7, 0), op(6, 1, 1, 0), op(3, 0, 0, 0)),
	}
}

// TestConnSeedsConverse: the first seeds are working conversations (data
// reaches the guest over an established connection), so the fuzzer
// starts from live connections.
func TestConnSeedsConverse(t *testing.T) {
	for i, s := range connSeeds()[:2] {
		if w := runConnOps(t, s); w.taken[OpRW] == 0 {
			t.Errorf("seed %d: no data reached the guest (rx packets by op: %v)", i, w.taken)
		}
	}
}
