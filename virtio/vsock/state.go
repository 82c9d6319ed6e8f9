package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Connections do not survive a snapshot, as in Firecracker: their host
// ends are sockets of the VMM that took it. Before the save the device
// tells the guest its transport was reset (VIRTIO_VSOCK_EVENT_TRANSPORT_RESET
// on the event queue): the guest's driver then resets every connected
// socket, keeps its listening ones, and reads its CID again, which a fork
// may have changed. The VM that took the snapshot and each VM restored
// from it handle the same event, and the host side connects again (the
// guest's agent listens throughout). Until the guest has handled the event
// the device delivers nothing, so a connection the host opens right after
// a restore is not caught in the reset.

// EventTransportReset is VIRTIO_VSOCK_EVENT_TRANSPORT_RESET, the id of
// struct virtio_vsock_event.
const EventTransportReset uint32 = 0

// ErrNoEventBuffer is returned by TransportReset when the guest has no
// buffer on the event queue to take the event.
var ErrNoEventBuffer = errors.New("virtio-vsock: no event buffer for the transport reset")

// State is what a snapshot keeps of the device beyond its transport.
type State struct {
	CID uint64
	// ResetPending: the transport reset event is in the guest's event
	// queue and the guest has not yet handled it; ResetAvail is the event
	// queue's available index when it was sent.
	ResetPending bool
	ResetAvail   uint16
	NextPort     uint32 // the next host-side port for a host connection
}

// Pause implements virtio.Pauser: the queue goroutines stop; connections
// stay as they are (their goroutines touch no guest memory).
func (v *Vsock) Pause() {
	if s := v.session(); s != nil {
		s.stopQueues()
	}
}

// Resume implements virtio.Pauser.
func (v *Vsock) Resume() {
	if s := v.session(); s != nil {
		s.startQueues()
		s.mu.Lock()
		s.wakeRx()
		s.mu.Unlock()
	}
}

func (v *Vsock) session() *session {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sess
}

// TransportReset drops every connection (closing their host sockets,
// without RSTs: the guest resets its side itself) and puts the transport
// reset event on the event queue. The device must be paused; the VMM calls
// it just before a snapshot. An inactive device has nothing to reset.
func (v *Vsock) TransportReset() error {
	s := v.session()
	if s == nil {
		return nil
	}
	return s.transportReset()
}

// Save returns the device's state; the device must be paused.
func (v *Vsock) Save() State {
	st := State{CID: v.cid, NextPort: firstHostPort}
	if s := v.session(); s != nil {
		s.mu.Lock()
		st.ResetPending, st.ResetAvail, st.NextPort = s.resetPending, s.resetAvail, s.nextPort
		s.mu.Unlock()
	}
	return st
}

// Restore takes the saved state for the session the restored transport
// starts. The CID stays this device's own: the guest reads it again when it
// handles the reset event.
func (v *Vsock) Restore(st State) error {
	if st.NextPort < firstHostPort {
		return fmt.Errorf("virtio-vsock: restore: host port %d below %d", st.NextPort, firstHostPort)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sess != nil {
		return errors.New("virtio-vsock: restore into an active device")
	}
	v.restored = &st
	return nil
}

// transportReset is TransportReset on the session, with its queue
// goroutines stopped.
func (s *session) transportReset() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		s.closeConn(c, false)
	}
	s.ready, s.rsts = nil, nil
	q := s.a.Queues[evQueue]
	if q == nil {
		return fmt.Errorf("%w (the guest did not set up the event queue)", ErrNoEventBuffer)
	}
	ch, err := q.Pop(s.a.Mem)
	if err != nil {
		return fmt.Errorf("virtio-vsock: event queue: %w", err)
	}
	if ch == nil {
		return ErrNoEventBuffer
	}
	var ev [4]byte
	binary.LittleEndian.PutUint32(ev[:], EventTransportReset)
	w := ch.NewWriter(s.a.Mem)
	if _, err := w.Write(ev[:]); err != nil {
		if perr := q.Push(s.a.Mem, ch.Head, 0); perr != nil {
			return fmt.Errorf("virtio-vsock: event queue: %w", perr)
		}
		return fmt.Errorf("virtio-vsock: event buffer of %d bytes: %w", ch.WritableLen, err)
	}
	if err := q.Push(s.a.Mem, ch.Head, w.Written()); err != nil {
		return fmt.Errorf("virtio-vsock: event queue: %w", err)
	}
	// The guest refills the event queue once it has handled the event;
	// that refill must be notified (EVENT_IDX), as it lets rx go on.
	if err := q.NotifyOnNext(s.a.Mem); err != nil {
		return fmt.Errorf("virtio-vsock: event queue: %w", err)
	}
	avail, err := q.AvailIdx(s.a.Mem)
	if err != nil {
		return fmt.Errorf("virtio-vsock: event queue: %w", err)
	}
	s.resetPending, s.resetAvail, s.resetAt = true, avail, time.Now()
	s.a.SignalUsed(q)
	return nil
}

// evLoop watches the event queue: the guest refilling it past resetAvail
// means it has handled the reset event, and rx may go on.
//
// While a reset is pending it also looks without a kick, every
// resetPoll: a refill whose notification was lost (a kick the guest made
// while a restored device was not yet running) would otherwise hold rx,
// and with it every host connection, until some later kick. After
// resetNudge it raises the device's interrupt again, once a resetPoll, at
// most resetNudges times: a guest whose reset interrupt was lost in a save
// has not seen the event at all. A spurious virtio interrupt is harmless
// (the driver finds no new used buffers). Both are logged: each means an
// interrupt or a notification went missing.
func (s *session) evLoop(stop <-chan struct{}) {
	q := s.a.Queues[evQueue]
	if q == nil {
		<-stop
		return
	}
	tick := time.NewTicker(resetPoll)
	defer tick.Stop()
	nudges := 0
	// The guest can have handled nothing before the queues ran: a reset
	// made at a save waits out the save (the vCPUs are paused).
	running := time.Now()
	for {
		var poll <-chan time.Time // only while a reset is pending
		s.mu.Lock()
		if s.resetPending {
			poll = tick.C
		}
		s.mu.Unlock()
		kicked := false
		select {
		case <-stop:
			return
		case <-s.a.Kicks[evQueue]:
			kicked = true
		case <-poll:
		}
		s.mu.Lock()
		if s.resetPending {
			idx, err := q.AvailIdx(s.a.Mem)
			if err != nil {
				s.mu.Unlock()
				s.fail(err)
				return
			}
			from := s.resetAt
			if running.After(from) {
				from = running
			}
			waited := time.Since(from)
			switch {
			case idx != s.resetAvail:
				s.resetPending = false
				s.wakeRx()
				if kicked && nudges == 0 {
					s.v.log.Debug("the guest handled the transport reset", "after_ms", waited.Milliseconds())
				} else {
					s.v.log.Info("the guest handled the transport reset without its notification", "after_ms", waited.Milliseconds(), "kicked", kicked, "interrupts_raised_again", nudges)
				}
			case waited >= resetNudge && nudges < resetNudges:
				nudges++
				if nudges == 1 {
					s.v.log.Warn("the guest has not handled the transport reset: raising the interrupt again", "after_ms", waited.Milliseconds())
				}
				s.a.Irq.UsedBuffer()
			}
		} else {
			nudges = 0
		}
		s.mu.Unlock()
	}
}

// The pending reset's watch (evLoop).
const (
	resetPoll   = 250 * time.Millisecond
	resetNudge  = time.Second
	resetNudges = 40
)
