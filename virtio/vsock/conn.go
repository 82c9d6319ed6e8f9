package vsock

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/cellvm/cellvm/virtio/queue"
)

// Control packets a connection owes the guest.
const (
	pendRequest uint8 = 1 << iota
	pendResponse
	pendCreditUpdate
)

// conn is one stream connection. All fields are guarded by the session
// lock; cond (on that lock) wakes the socket goroutines. state says what
// the others mean (connstate.go), and moves only by move and closeConn.
type conn struct {
	s     *session
	key   connKey
	uds   *net.UnixConn // set before the socket goroutines start, then fixed
	cond  *sync.Cond
	timer *time.Timer // guest accept timeout, host-initiated only

	state   connState
	queued  bool // in s.ready
	pending uint8

	// Guest to host. rxCnt counts bytes taken from the guest, fwdCnt those
	// written to the host socket; the difference is buffered in toHost and
	// never exceeds bufAlloc.
	rxCnt, fwdCnt uint32
	lastFwdSent   uint32 // fwd_cnt as the guest last heard it
	toHost        []byte
	okPending     []byte // "OK <port>\n", written before any data

	// Host to guest. txCnt counts bytes sent to the guest; the guest's
	// buf_alloc and fwd_cnt bound how far it may run ahead.
	txCnt        uint32
	peerBufAlloc uint32
	peerFwdCnt   uint32
	toGuest      []byte
	// ahead is the reader's next chunk, read while the rx goroutine
	// copied toGuest into the guest: it becomes toGuest when that is
	// taken (took). ahead is nil whenever toGuest is empty, so toGuest's
	// length alone says whether the guest has data to take.
	ahead []byte
}

// move takes c to the state after ev. An illegal move is logged
// (rate-limited) and resets c; a move that ends c (both directions done,
// or the guest closed and toHost flushed) closes it with the RST the
// guest waits for. It reports whether c is still live.
func (c *conn) move(ev connEvent) bool {
	next, ok := c.state.next(ev)
	if !ok {
		c.s.v.log.Warn("illegal connection move: reset", "state", c.state.String(), "event", ev.String(),
			"port", c.key.local, "peer_port", c.key.peer)
		c.s.closeConn(c, true)
		return false
	}
	if next.killed() {
		c.s.closeConn(c, true)
		return false
	}
	c.state = next
	return true
}

// peerCredit is how many more bytes the guest can take.
func (c *conn) peerCredit() uint32 {
	used := c.txCnt - c.peerFwdCnt
	if used >= c.peerBufAlloc {
		return 0
	}
	return c.peerBufAlloc - used
}

func (c *conn) updateCredit(h Header) {
	c.peerBufAlloc, c.peerFwdCnt = h.BufAlloc, h.FwdCnt
	if len(c.toGuest) > 0 && c.peerCredit() > 0 {
		c.s.schedule(c)
	}
	c.cond.Broadcast()
}

// needCreditUpdate says whether the guest should hear about freed buffer
// space now: it has something new to hear and, as far as it knows, our
// buffer is at least half full.
func (c *conn) needCreditUpdate() bool {
	return c.fwdCnt != c.lastFwdSent && c.rxCnt-c.lastFwdSent >= bufAlloc/2
}

// nextOp is the next packet c owes the guest, if any.
func (c *conn) nextOp() (uint16, bool) {
	switch {
	case c.state.killed():
		return 0, false
	case c.pending&pendRequest != 0:
		return OpRequest, true
	case c.pending&pendResponse != 0:
		return OpResponse, true
	case c.state.phase == phaseEstablished && len(c.toGuest) > 0 && c.peerCredit() > 0:
		return OpRW, true
	case c.state.recv == recvEOF && len(c.toGuest) == 0:
		return OpShutdown, true
	case c.pending&pendCreditUpdate != 0:
		return OpCreditUpdate, true
	}
	return 0, false
}

func (c *conn) header(op uint16) Header {
	h := Header{
		SrcCID: HostCID, DstCID: c.s.v.cid, SrcPort: c.key.local, DstPort: c.key.peer,
		Type: TypeStream, Op: op, BufAlloc: bufAlloc, FwdCnt: c.fwdCnt,
	}
	if op == OpShutdown {
		h.Flags = ShutdownSend
	}
	return h
}

// took commits packet h, now going into an rx buffer with room bytes for
// data, and returns the data to send with it.
func (c *conn) took(h *Header, room uint32) []byte {
	c.lastFwdSent = c.fwdCnt
	c.pending &^= pendCreditUpdate // every packet carries the credit
	var data []byte
	switch h.Op {
	case OpRequest:
		c.pending &^= pendRequest
	case OpResponse:
		c.pending &^= pendResponse
	case OpRW:
		n := min(uint32(len(c.toGuest)), c.peerCredit(), room, MaxPayload)
		data, c.toGuest = c.toGuest[:n], c.toGuest[n:]
		c.txCnt += n
		if len(c.toGuest) == 0 {
			// The chunk read ahead is next; the reader may fetch more
			// into the buffer just emptied (data is copied out of it
			// under mu before the reader can run).
			c.toGuest, c.ahead = c.ahead, nil
			c.cond.Broadcast()
		}
	case OpShutdown:
		c.move(evShutSent)
	}
	return data
}

// fromGuest takes an RW packet's payload for the host socket.
func (c *conn) fromGuest(payload *queue.Reader, n uint32) {
	if !c.move(evData) {
		return
	}
	if c.rxCnt+n-c.fwdCnt > bufAlloc {
		c.s.v.log.Warn("guest overran its credit", "port", c.key.local)
		c.s.closeConn(c, true)
		return
	}
	start := len(c.toHost)
	c.toHost = append(c.toHost, make([]byte, n)...)
	if _, err := io.ReadFull(payload, c.toHost[start:]); err != nil {
		c.s.closeConn(c, true)
		return
	}
	c.rxCnt += n
	c.cond.Broadcast()
}

// guestShutdown takes a SHUTDOWN's flags; with none it does nothing.
func (c *conn) guestShutdown(flags uint32) {
	var ev connEvent
	switch flags & (ShutdownRcv | ShutdownSend) {
	case 0:
		return
	case ShutdownRcv:
		ev = evShutRecv
	case ShutdownSend:
		ev = evShutSend
	default:
		ev = evShutBoth // Linux's close(): it waits for our RST
	}
	if !c.move(ev) {
		return
	}
	if flags&ShutdownRcv != 0 {
		c.toGuest, c.ahead = nil, nil
	}
	c.cond.Broadcast()
}

// hostReader moves host socket data towards the guest, reading no more
// than the guest has credit for. It reads into two buffers of its own in
// turn and hands each to the rx goroutine without a copy: as toGuest, or
// as ahead while toGuest is still being taken, so the next read from the
// host overlaps the copy of the last into the guest. It reads only while
// ahead is empty, so the buffer it reads into is never the one toGuest
// holds: that is the other, the last one handed over.
func (c *conn) hostReader() {
	s := c.s
	defer s.wg.Done()
	bufs := [2][]byte{make([]byte, MaxPayload), make([]byte, MaxPayload)}
	next := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !c.state.killed() && (c.state.phase != phaseEstablished || c.state.recv != recvOpen || c.ahead != nil || c.readCredit() == 0) {
			c.cond.Wait()
		}
		if c.state.killed() {
			return
		}
		n := min(c.readCredit(), MaxPayload)
		buf := bufs[next]
		s.mu.Unlock()
		k, err := c.uds.Read(buf[:n])
		s.mu.Lock()
		if c.state.killed() {
			return
		}
		if k > 0 {
			// No copy: took copies toGuest into guest memory under mu,
			// and this buffer is read again only after it is taken.
			if len(c.toGuest) == 0 {
				c.toGuest = buf[:k:k]
			} else {
				c.ahead = buf[:k:k]
			}
			next ^= 1
			s.schedule(c)
		}
		if err != nil {
			if c.move(evHostEOF) {
				s.schedule(c)
			}
			return
		}
	}
}

// readCredit is how much more the reader may read: the guest's credit
// less what toGuest already holds for it.
func (c *conn) readCredit() uint32 {
	return c.peerCredit() - min(uint32(len(c.toGuest)), c.peerCredit())
}

// hostWriter writes guest data (and the OK line) to the host socket, then
// half-closes it when the guest shuts down its sending side.
func (c *conn) hostWriter() {
	s := c.s
	defer s.wg.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		for !c.state.killed() && c.okPending == nil && len(c.toHost) == 0 && c.state.send != sendShut && c.state.send != sendClosing {
			c.cond.Wait()
		}
		if c.state.killed() {
			return
		}
		var data []byte
		isData := false
		switch {
		case c.okPending != nil:
			data, c.okPending = c.okPending, nil
		case len(c.toHost) > 0:
			data, c.toHost, isData = c.toHost, nil, true
		}
		if data == nil {
			// Flushed, and the guest sends no more.
			if !c.move(evWriteShut) {
				return // closed: the guest had closed, or both directions are done
			}
			s.mu.Unlock()
			err := c.uds.CloseWrite()
			s.mu.Lock()
			if err != nil && !c.state.killed() {
				s.closeConn(c, true)
				return
			}
			continue
		}
		s.mu.Unlock()
		_, err := c.uds.Write(data)
		s.mu.Lock()
		if c.state.killed() {
			return
		}
		if err != nil {
			s.v.log.Debug("host socket write", "port", c.key.local, "err", err)
			s.closeConn(c, true)
			return
		}
		if isData {
			c.fwdCnt += uint32(len(data))
			if c.needCreditUpdate() {
				c.pending |= pendCreditUpdate
				s.schedule(c)
			}
		}
	}
}
