package vsock

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// connTable is the connection's whole transition table: a row for every
// state a connection can reach, a column for every event, each cell the
// next state or "-" where the move is refused (and the connection reset).
//
// A state is written in three letters: the phase (L localInit, P
// peerInit, E established), then send (o open, s shut, c closing, d done),
// then recv (o open, r refused, e EOF, d done). K is killed.
var connTable = map[string][numConnEvents]string{
	//       response data   shutRecv shutSend shutBoth dialed hostEOF shutSent writeShut kill
	"Loo": {"Eoo", "-", "-", "-", "-", "-", "-", "-", "-", "K"},
	"Poo": {"-", "-", "Por", "Pso", "Pcr", "Eoo", "-", "-", "-", "K"},
	"Por": {"-", "-", "Por", "Psr", "Pcr", "Eor", "-", "-", "-", "K"},
	"Pso": {"-", "-", "Psr", "Pso", "Pcr", "Eso", "-", "-", "-", "K"},
	"Psr": {"-", "-", "Psr", "Psr", "Pcr", "Esr", "-", "-", "-", "K"},
	"Pcr": {"-", "-", "Pcr", "Pcr", "Pcr", "Ecr", "-", "-", "-", "K"},
	"Eoo": {"-", "Eoo", "Eor", "Eso", "Ecr", "-", "Eoe", "-", "-", "K"},
	"Eor": {"-", "Eor", "Eor", "Esr", "Ecr", "-", "Eoe", "-", "-", "K"},
	"Eoe": {"-", "Eoe", "Eoe", "Ese", "Ece", "-", "-", "Eod", "-", "K"},
	"Eod": {"-", "Eod", "Eod", "Esd", "Ecd", "-", "-", "-", "-", "K"},
	"Eso": {"-", "-", "Esr", "Eso", "Ecr", "-", "Ese", "-", "Edo", "K"},
	"Esr": {"-", "-", "Esr", "Esr", "Ecr", "-", "Ese", "-", "Edr", "K"},
	"Ese": {"-", "-", "Ese", "Ese", "Ece", "-", "-", "Esd", "Ede", "K"},
	"Esd": {"-", "-", "Esd", "Esd", "Ecd", "-", "-", "-", "K", "K"},
	"Ecr": {"-", "-", "Ecr", "Ecr", "Ecr", "-", "Ece", "-", "K", "K"},
	"Ece": {"-", "-", "Ece", "Ece", "Ece", "-", "-", "Ecd", "K", "K"},
	"Ecd": {"-", "-", "Ecd", "Ecd", "Ecd", "-", "-", "-", "K", "K"},
	"Edo": {"-", "-", "Edr", "Edo", "K", "-", "Ede", "-", "-", "K"},
	"Edr": {"-", "-", "Edr", "Edr", "K", "-", "Ede", "-", "-", "K"},
	"Ede": {"-", "-", "Ede", "Ede", "K", "-", "-", "K", "-", "K"},
	"K":   {"-", "-", "-", "-", "-", "-", "-", "-", "-", "-"},
}

func stateCode(st connState) string {
	if st.killed() {
		return "K"
	}
	return "LPE"[st.phase:st.phase+1] + "oscd"[st.send:st.send+1] + "ored"[st.recv:st.recv+1]
}

// parseState is stateCode's inverse.
func parseState(t *testing.T, code string) connState {
	t.Helper()
	for p := range phaseKilled + 1 {
		for s := range sendDone + 1 {
			for r := range recvDone + 1 {
				st := connState{p, s, r}
				if p == phaseKilled {
					st = connKilled
				}
				if stateCode(st) == code {
					return st
				}
			}
		}
	}
	t.Fatalf("no state %q", code)
	return connState{}
}

// TestConnStateTable checks next against every cell of connTable, and the
// table against the states next reaches from the two initial states: a
// reachable state without a row, a row no connection reaches, or an empty
// cell fails (and a state with two rows does not compile).
func TestConnStateTable(t *testing.T) {
	for code, next := range connTable {
		from := parseState(t, code)
		for ev := range numConnEvents {
			want := next[ev]
			if want == "" {
				t.Errorf("%s on %s: missing from the table", from, ev)
				continue
			}
			got, ok := from.next(ev)
			switch {
			case want == "-" && ok:
				t.Errorf("%s on %s: moved to %s, want refused", from, ev, got)
			case want == "-" && got != from:
				t.Errorf("%s on %s: refused but changed to %s", from, ev, got)
			case want != "-" && !ok:
				t.Errorf("%s on %s: refused, want %s", from, ev, parseState(t, want))
			case want != "-" && stateCode(got) != want:
				t.Errorf("%s on %s: moved to %s, want %s", from, ev, got, parseState(t, want))
			}
			if _, ok := connTable[want]; want != "-" && !ok {
				t.Errorf("%s on %s: next state %s has no row", from, ev, want)
			}
		}
	}
	reached := map[string]bool{}
	todo := []connState{{phase: phaseLocalInit}, {phase: phasePeerInit}}
	for len(todo) > 0 {
		st := todo[0]
		todo = todo[1:]
		if reached[stateCode(st)] {
			continue
		}
		reached[stateCode(st)] = true
		if _, ok := connTable[stateCode(st)]; !ok {
			t.Errorf("reachable state %s (%s) has no row", st, stateCode(st))
		}
		for ev := range numConnEvents {
			if next, ok := st.next(ev); ok {
				todo = append(todo, next)
			}
		}
	}
	for code := range connTable {
		if !reached[code] {
			t.Errorf("row %s: no connection reaches it", code)
		}
	}
}

// TestIllegalMovesReset: a guest that breaks the protocol gets an RST and
// the host socket is closed; the device carries on.
func TestIllegalMovesReset(t *testing.T) {
	cases := []struct {
		name string
		ops  []Header // after the host's CONNECT and the guest's REQUEST
	}{
		{"SHUTDOWN before RESPONSE", []Header{{Op: OpShutdown, Flags: ShutdownSend}}},
		{"second RESPONSE", []Header{{Op: OpResponse}, {Op: OpResponse}}},
		{"data after SHUTDOWN send", []Header{{Op: OpResponse}, {Op: OpShutdown, Flags: ShutdownSend}, {Op: OpRW}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := newGuest(t)
			c, req := g.hostRequest(60)
			for _, h := range tc.ops {
				h.SrcPort, h.DstPort = 60, req.SrcPort
				var data []byte
				if h.Op == OpRW {
					data = []byte("late")
				}
				g.send(h, data)
			}
			if h, _ := g.expect(OpRST); h.SrcPort != req.SrcPort || h.DstPort != 60 {
				t.Fatalf("RST %+v", h)
			}
			// The host reads the OK line, if the guest's RESPONSE came
			// first, then the end.
			c.SetReadDeadline(time.Now().Add(wait))
			buf := make([]byte, 64)
			for {
				_, err := c.Read(buf)
				if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
					break
				}
				if err != nil {
					t.Fatalf("host read: %v; want the end", err)
				}
			}
			if g.h.NeedsReset() {
				t.Fatal("an illegal move broke the device")
			}
		})
	}
}

// TestHalvesDoneReset: once each side has shut its sending half, in
// either order, the guest gets the RST that ends the connection.
func TestHalvesDoneReset(t *testing.T) {
	t.Run("guest first", func(t *testing.T) {
		g := newGuest(t)
		c, req := g.hostConnect(94)
		g.send(Header{SrcPort: 94, DstPort: req.SrcPort, Op: OpShutdown, Flags: ShutdownSend}, nil)
		expectEOF(t, c)
		c.Close()
		if h, _ := g.expect(OpShutdown); h.Flags != ShutdownSend {
			t.Fatalf("SHUTDOWN flags %d", h.Flags)
		}
		g.expectReset(req.SrcPort, 94)
	})
	t.Run("host first", func(t *testing.T) {
		g := newGuest(t)
		c, req := g.hostConnect(95)
		c.(*net.UnixConn).CloseWrite()
		if h, _ := g.expect(OpShutdown); h.Flags != ShutdownSend {
			t.Fatalf("SHUTDOWN flags %d", h.Flags)
		}
		g.send(Header{SrcPort: 95, DstPort: req.SrcPort, Op: OpRW}, []byte("after"))
		g.send(Header{SrcPort: 95, DstPort: req.SrcPort, Op: OpShutdown, Flags: ShutdownSend}, nil)
		if got := readN(t, c, 5); string(got) != "after" {
			t.Fatalf("host got %q", got)
		}
		g.expectReset(req.SrcPort, 95)
		expectEOF(t, c)
	})
}

// expectReset waits for the RST of connection local:peer and checks it
// is gone.
func (g *guest) expectReset(local, peer uint32) {
	g.t.Helper()
	if h, _ := g.expect(OpRST); h.SrcPort != local || h.DstPort != peer {
		g.t.Fatalf("RST %+v", h)
	}
	g.dev.mu.Lock()
	n := len(g.dev.sess.conns)
	g.dev.mu.Unlock()
	if n != 0 {
		g.t.Fatalf("%d connections left", n)
	}
}
