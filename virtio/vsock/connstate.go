package vsock

import "fmt"

// connState is where a connection is in its life. It follows Firecracker's
// ConnState (LocalInit, PeerInit, Established, LocalClosed,
// PeerClosed(recv, send), Killed), except that cellvm ends each direction
// on its own: the guest's SHUTDOWN send half-closes the host socket, and
// the host socket's EOF becomes a SHUTDOWN send to the guest, each while
// the other direction goes on. So where Firecracker has LocalClosed and
// PeerClosed, a connState keeps, beside its phase, the state of each
// direction: send (guest to host) and recv (host to guest), named from the
// guest's side as SHUTDOWN's flags are.
//
// The phase says what conn's fields mean:
//
//   - localInit: the host connected ("CONNECT <port>"). uds is its socket;
//     timer runs the guest's accept timeout; pending holds pendRequest
//     until the REQUEST goes out; the reader and writer wait for the
//     guest's RESPONSE. toHost, toGuest and okPending are empty, and both
//     directions are open.
//   - peerInit: the guest sent a REQUEST and a goroutine dials the host
//     listener for its port. uds is nil, timer is nil, and no reader or
//     writer runs. The guest may already have shut a direction (connect,
//     then shutdown, on a non-blocking socket): send and recv keep it, and
//     it takes effect once established.
//   - established: uds, the reader and the writer run; send and recv say
//     what each direction does. okPending holds "OK <port>\n" until the
//     writer has sent it (host-initiated only); pending may hold
//     pendResponse (guest-initiated only, until the RESPONSE goes out) and
//     pendCreditUpdate.
//   - killed: the connection is gone: out of s.conns, uds closed, timer
//     stopped. Its reader, writer and dialer return when they next hold
//     the lock, and nothing more is sent for it but the RST (in s.rsts)
//     that reset it, if any. It may still be in s.ready until rx drops it;
//     send and recv are zero.
//
// send, the guest-to-host direction (toHost, rxCnt, fwdCnt, lastFwdSent;
// the writer):
//
//   - sendOpen: RW packets are taken into toHost, within bufAlloc, and the
//     writer writes them to uds.
//   - sendShut: the guest sends no more (SHUTDOWN send; with Firecracker,
//     PeerClosed(_, true)): the writer writes what toHost holds, then
//     half-closes uds.
//   - sendClosing: the guest closed (SHUTDOWN rcv|send in one packet, as
//     Linux's close() sends, which then waits for our RST): the writer
//     writes what toHost holds, then the connection is reset.
//   - sendDone: uds's write side is closed; toHost stays empty.
//
// recv, the host-to-guest direction (toGuest, txCnt, peerBufAlloc,
// peerFwdCnt; the reader):
//
//   - recvOpen: the reader reads uds as far as the guest's credit goes;
//     toGuest holds what the guest has still to take.
//   - recvRefused: the guest receives no more (SHUTDOWN rcv;
//     PeerClosed(true, _)): toGuest was dropped and the reader reads no
//     more, though a read already under way still ends in toGuest or
//     recvEOF.
//   - recvEOF: the reader met uds's end (EOF or an error) and returned
//     (Firecracker's LocalClosed): the guest gets what toGuest holds,
//     then a SHUTDOWN send.
//   - recvDone: the guest has our SHUTDOWN.
//
// A connection ends (killed) with an RST to the guest when both
// directions are done, when the guest has closed and the writer has
// flushed, and on an error, a timeout or an illegal move; without one on
// the guest's RST and on a device or transport reset.
type connState struct {
	phase connPhase
	send  sendState
	recv  recvState
}

type connPhase uint8

const (
	phaseLocalInit connPhase = iota
	phasePeerInit
	phaseEstablished
	phaseKilled
)

type sendState uint8

const (
	sendOpen sendState = iota
	sendShut
	sendClosing
	sendDone
)

type recvState uint8

const (
	recvOpen recvState = iota
	recvRefused
	recvEOF
	recvDone
)

// connEvent is what moves a connection: a guest packet, or the host side's
// progress.
type connEvent uint8

const (
	evResponse  connEvent = iota // the guest's RESPONSE: it accepted a host connection
	evData                       // the guest's RW
	evShutRecv                   // the guest's SHUTDOWN rcv
	evShutSend                   // the guest's SHUTDOWN send
	evShutBoth                   // the guest's SHUTDOWN rcv|send, in one packet
	evDialed                     // the host listener took a guest connection
	evHostEOF                    // the reader met uds's end
	evShutSent                   // the guest took our SHUTDOWN send
	evWriteShut                  // the writer flushed toHost after the guest shut send
	evKill                       // reset or dropped: RST either way, a timeout, an error, a device reset
	numConnEvents
)

// connKilled is every killed connection's state.
var connKilled = connState{phase: phaseKilled}

func (st connState) killed() bool { return st.phase == phaseKilled }

// next is the connection's one transition function: the state after ev,
// or false, with st unchanged, where ev is illegal in st. An illegal move
// comes from a guest that breaks the protocol (data before the handshake
// or after its SHUTDOWN send, a second RESPONSE) or from a bug; the caller
// resets the connection. A killed connection takes no event: it is gone,
// and closing it again is a no-op.
func (st connState) next(ev connEvent) (connState, bool) {
	if st.phase == phaseKilled {
		return st, false
	}
	if ev == evKill {
		return connKilled, true
	}
	switch st.phase {
	case phaseLocalInit:
		// Linux answers a REQUEST with a RESPONSE (or an RST) before it
		// sends anything else for that connection.
		if ev == evResponse {
			st.phase = phaseEstablished
			return st, true
		}
		return st, false
	case phasePeerInit:
		switch ev {
		case evDialed:
			st.phase = phaseEstablished
			return st, true
		case evShutRecv, evShutSend, evShutBoth:
			return st.shut(ev), true
		}
		return st, false
	}
	switch ev {
	case evData:
		return st, st.send == sendOpen
	case evShutRecv, evShutSend, evShutBoth:
		if ev == evShutBoth && st.send == sendDone {
			return connKilled, true // flushed and half-closed already: the RST it waits for
		}
		return st.shut(ev), true
	case evHostEOF:
		if st.recv != recvOpen && st.recv != recvRefused {
			return st, false // the reader returned at its first end
		}
		st.recv = recvEOF
		return st, true
	case evShutSent:
		if st.recv != recvEOF {
			return st, false
		}
		st.recv = recvDone
		return st.ended(), true
	case evWriteShut:
		switch st.send {
		case sendShut:
			st.send = sendDone
			return st.ended(), true
		case sendClosing:
			return connKilled, true
		}
		return st, false
	}
	return st, false // evResponse, evDialed
}

// shut applies a guest SHUTDOWN (but rcv|send after sendDone, which ends
// the connection). Its flags add to those before; a repeated one changes
// nothing.
func (st connState) shut(ev connEvent) connState {
	if ev != evShutSend && st.recv == recvOpen {
		st.recv = recvRefused
	}
	switch {
	case ev == evShutBoth:
		st.send = sendClosing
	case ev == evShutSend && st.send == sendOpen:
		st.send = sendShut
	}
	return st
}

// ended is st, or killed once both directions are done.
func (st connState) ended() connState {
	if st.send == sendDone && st.recv == recvDone {
		return connKilled
	}
	return st
}

func (st connState) String() string {
	switch st.phase {
	case phaseLocalInit:
		return "localInit"
	case phaseKilled:
		return "killed"
	}
	return fmt.Sprintf("%s(send %s, recv %s)", st.phase, st.send, st.recv)
}

func (p connPhase) String() string {
	return enumName(int(p), "localInit", "peerInit", "established", "killed")
}

func (s sendState) String() string {
	return enumName(int(s), "open", "shut", "closing", "done")
}

func (r recvState) String() string {
	return enumName(int(r), "open", "refused", "eof", "done")
}

func (ev connEvent) String() string {
	return enumName(int(ev), "response", "data", "shutdown rcv", "shutdown send", "shutdown rcv|send",
		"dialed", "host EOF", "shutdown sent", "write shut", "kill")
}

func enumName(i int, names ...string) string {
	if i < len(names) {
		return names[i]
	}
	return fmt.Sprintf("?%d", i)
}
