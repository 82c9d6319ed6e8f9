package vsock

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// session is one activation of the device: its queues and connections. A
// reset ends the session and drops every connection.
type session struct {
	v *Vsock
	a *virtio.Activation

	stop chan struct{}
	wg   sync.WaitGroup
	// queues runs the queue goroutines (rx, tx, event), which stop and
	// start on their own for a pause; the connections' goroutines above
	// go on.
	queues virtio.Workers

	mu       sync.Mutex
	conns    map[connKey]*conn
	ready    []*conn  // connections with something for the guest, in order
	rsts     []Header // RSTs for connections that are already gone
	rxWake   chan struct{}
	nextPort uint32
	ended    bool
	// resetPending holds rx back after a transport reset event until the
	// guest has handled it (it refills the event queue past resetAvail):
	// a connection the host opens meanwhile would die in that handling.
	resetPending bool
	resetAvail   uint16
	resetAt      time.Time // when resetPending was set (the restore, for a restored one)
}

// connKey names a connection: the host-side port and the guest's port.
type connKey struct{ local, peer uint32 }

func newSession(v *Vsock, a *virtio.Activation) *session {
	return &session{
		v: v, a: a,
		stop:     make(chan struct{}),
		conns:    map[connKey]*conn{},
		rxWake:   make(chan struct{}, 1),
		nextPort: firstHostPort,
	}
}

func (s *session) start() { s.startQueues() }

// startQueues starts the queue goroutines.
func (s *session) startQueues() { s.queues.Start(s.rxLoop, s.txLoop, s.evLoop) }

// stopQueues stops the queue goroutines and waits for them.
func (s *session) stopQueues() { s.queues.Stop() }

// shutdown drops every connection and waits for the session's goroutines.
func (s *session) shutdown() {
	s.stopQueues()
	close(s.stop)
	s.mu.Lock()
	s.ended = true
	for _, c := range s.conns {
		s.closeConn(c, false)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// fail reports a broken queue; the device stops until the driver resets it.
func (s *session) fail(err error) {
	s.a.Irq.NeedsReset(fmt.Errorf("virtio-vsock: %w", err))
}

// wakeRx tells the rx goroutine there is something for the guest.
func (s *session) wakeRx() {
	select {
	case s.rxWake <- struct{}{}:
	default:
	}
}

// schedule queues c for the rx goroutine. Called with mu held.
func (s *session) schedule(c *conn) {
	if !c.queued && !c.state.killed() {
		c.queued = true
		s.ready = append(s.ready, c)
	}
	s.wakeRx()
}

// queueRST answers a packet for a connection that does not exist (or no
// longer does) with RST. Called with mu held.
func (s *session) queueRST(local, peer uint32) {
	if len(s.rsts) >= maxPendingRST {
		return // the guest is not taking rx buffers; it will time out
	}
	s.rsts = append(s.rsts, Header{
		SrcCID: HostCID, DstCID: s.v.cid, SrcPort: local, DstPort: peer,
		Type: TypeStream, Op: OpRST,
	})
	s.wakeRx()
}

// closeConn removes c and closes its host socket, which ends its reader and
// writer; with rst the guest is told. Called with mu held.
func (s *session) closeConn(c *conn, rst bool) {
	next, ok := c.state.next(evKill)
	if !ok {
		return // killed already
	}
	c.state = next
	delete(s.conns, c.key)
	if c.uds != nil {
		c.uds.Close()
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cond.Broadcast()
	if rst {
		s.queueRST(c.key.local, c.key.peer)
	}
}

// hostConnect starts a host-initiated connection to guest port. Called
// with the device lock held (not mu).
func (s *session) hostConnect(uds *net.UnixConn, port uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || len(s.conns) >= maxConns {
		uds.Close()
		return
	}
	key := connKey{local: s.nextPort, peer: port}
	for s.conns[key] != nil {
		key.local++
		if key.local == 0 {
			key.local = firstHostPort
		}
	}
	s.nextPort = key.local + 1
	if s.nextPort == 0 {
		s.nextPort = firstHostPort
	}
	c := s.newConn(key, uds, connState{phase: phaseLocalInit})
	c.pending |= pendRequest
	c.timer = time.AfterFunc(guestAcceptTimeout, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.state.phase == phaseLocalInit {
			s.v.log.Info("guest did not accept", "port", port)
			s.closeConn(c, true)
		}
	})
	s.startIO(c)
	s.schedule(c)
}

// guestConnect starts a guest-initiated connection (REQUEST) by dialing the
// host listener for its port off the tx goroutine. Called with mu held.
func (s *session) guestConnect(h Header) {
	key := connKey{local: h.DstPort, peer: h.SrcPort}
	if len(s.conns) >= maxConns {
		s.queueRST(key.local, key.peer)
		return
	}
	c := s.newConn(key, nil, connState{phase: phasePeerInit})
	c.updateCredit(h)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		uds, err := s.v.dialHost(key.local)
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.state.killed() {
			if uds != nil {
				uds.Close()
			}
			return
		}
		if err != nil {
			s.v.log.Debug("guest connect: nobody listening", "port", key.local, "err", err)
			s.closeConn(c, true)
			return
		}
		c.uds = uds // closeConn closes it from here on
		if !c.move(evDialed) {
			return
		}
		c.pending |= pendResponse
		s.startIO(c)
		s.schedule(c)
	}()
}

func (s *session) newConn(key connKey, uds *net.UnixConn, st connState) *conn {
	c := &conn{s: s, key: key, uds: uds, state: st}
	c.cond = sync.NewCond(&s.mu)
	s.conns[key] = c
	return c
}

// startIO starts c's socket goroutines. Called with mu held.
func (s *session) startIO(c *conn) {
	s.wg.Add(2)
	go c.hostReader()
	go c.hostWriter()
}

func (s *session) okLine(c *conn) []byte {
	return []byte("OK " + strconv.FormatUint(uint64(c.key.local), 10) + "\n")
}

// txLoop handles the packets the guest sends.
func (s *session) txLoop(stop <-chan struct{}) {
	q := s.a.Queues[txQueue]
	for {
		select {
		case <-stop:
			return
		case <-s.a.Kicks[txQueue]:
		}
		if err := s.drainTx(q); err != nil {
			s.fail(err)
			return
		}
	}
}

func (s *session) drainTx(q *queue.Queue) error {
	defer s.a.SignalUsed(q)
	for {
		ch, err := q.Pop(s.a.Mem)
		if err != nil {
			return err
		}
		if ch == nil {
			return nil
		}
		h, payload, err := parsePacket(s.a.Mem, ch)
		if err != nil {
			s.v.log.Warn("bad tx packet", "err", err)
			s.mu.Lock()
			if h.Op != OpRST && ch.ReadableLen >= HeaderLen {
				s.resetKey(connKey{local: h.DstPort, peer: h.SrcPort})
			}
			s.mu.Unlock()
		} else {
			s.mu.Lock()
			s.handle(h, payload)
			s.mu.Unlock()
		}
		if err := q.Push(s.a.Mem, ch.Head, 0); err != nil {
			return err
		}
	}
}

// resetKey resets the connection key names, or answers RST if there is
// none. Called with mu held.
func (s *session) resetKey(key connKey) {
	if c := s.conns[key]; c != nil {
		s.closeConn(c, true)
		return
	}
	s.queueRST(key.local, key.peer)
}

// handle acts on one guest packet. Called with mu held.
func (s *session) handle(h Header, payload *queue.Reader) {
	if h.SrcCID != s.v.cid || h.DstCID != HostCID {
		s.v.log.Debug("packet with foreign addresses dropped", "src", h.SrcCID, "dst", h.DstCID)
		return
	}
	key := connKey{local: h.DstPort, peer: h.SrcPort}
	if h.Type != TypeStream {
		if h.Op != OpRST {
			s.resetKey(key)
		}
		return
	}
	c := s.conns[key]
	if c == nil {
		switch h.Op {
		case OpRequest:
			s.guestConnect(h)
		case OpRST:
		default:
			s.queueRST(key.local, key.peer)
		}
		return
	}
	c.updateCredit(h)
	switch h.Op {
	case OpResponse:
		if !c.move(evResponse) {
			return
		}
		c.timer.Stop()
		c.okPending = s.okLine(c)
		c.cond.Broadcast()
	case OpRW:
		c.fromGuest(payload, h.Len)
	case OpCreditUpdate:
	case OpCreditRequest:
		c.pending |= pendCreditUpdate
		s.schedule(c)
	case OpShutdown:
		c.guestShutdown(h.Flags)
	case OpRST:
		s.closeConn(c, false)
	default: // REQUEST on a live connection, or an unknown op
		s.closeConn(c, true)
	}
}

// rxLoop delivers packets to the guest as rx buffers become available.
func (s *session) rxLoop(stop <-chan struct{}) {
	q := s.a.Queues[rxQueue]
	for {
		select {
		case <-stop:
			return
		case <-s.a.Kicks[rxQueue]:
		case <-s.rxWake:
		}
		if err := s.fillRx(q); err != nil {
			s.fail(err)
			return
		}
	}
}

func (s *session) fillRx(q *queue.Queue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.a.SignalUsed(q)
	for !s.resetPending && (len(s.rsts) > 0 || len(s.ready) > 0) {
		var h Header
		var c *conn
		if len(s.rsts) == 0 {
			c = s.ready[0]
			op, ok := c.nextOp()
			if !ok {
				c.queued = false
				s.ready = s.ready[1:]
				continue
			}
			h = c.header(op)
		}
		n, err := q.Available(s.a.Mem)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // the guest kicks rx when it adds buffers
		}
		ch, err := q.Pop(s.a.Mem)
		if err != nil {
			return err
		}
		w := ch.NewWriter(s.a.Mem)
		if w.Remaining() < HeaderLen {
			s.v.log.Warn("rx buffer too small for a header", "len", w.Remaining())
			if err := q.Push(s.a.Mem, ch.Head, 0); err != nil {
				return err
			}
			continue
		}
		var data []byte
		if c == nil {
			h = s.rsts[0]
			s.rsts = s.rsts[1:]
		} else {
			data = c.took(&h, w.Remaining()-HeaderLen)
			if len(s.ready) > 1 && s.ready[0] == c {
				s.ready = append(s.ready[1:], c) // round robin
			}
		}
		var hb [HeaderLen]byte
		h.Len = uint32(len(data))
		h.Encode(hb[:])
		if _, err := w.Write(hb[:]); err != nil {
			return err
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
		if err := q.Push(s.a.Mem, ch.Head, w.Written()); err != nil {
			return err
		}
	}
	return nil
}
