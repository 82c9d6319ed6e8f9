// Package hostileagent is a guest agent that breaks the protocol on
// purpose, for tests of the host's defences (agentclient, the sandbox
// manager): the guest controls its agent, so the host must hold when the
// agent sends too much, sends more than it announced, or never answers.
//
// It speaks the protocol well enough to be dialled (hello, health) and
// does one hostile thing per request it is given, chosen by the request's
// code, argv or path (the constants below). It is test support, not part
// of any binary.
package hostileagent

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"strings"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// What a request asks of the hostile agent.
const (
	// CodeOK is a cell that answers 2, as an honest agent would.
	CodeOK = "1 + 1"
	// CodeHugeResult answers with a result whose stdout is HugeBytes long,
	// in a message larger than the host accepts.
	CodeHugeResult = "huge result"
	// CodeLongStdout answers with a result in a message of ordinary size
	// whose stdout passes the host's bound on a result's output.
	CodeLongStdout = "long stdout"
	// CodeSilent and ArgvSilent never answer: the agent holds the
	// connection open, reading nothing, until the host closes it.
	CodeSilent = "silent"
	ArgvSilent = "silent"
	// CodeFloodConsole writes FloodBytes to the console, then answers 2.
	CodeFloodConsole = "flood console"
	// CodeHangUp sends the first frame of a large event and closes the
	// connection, as an agent that gave up on the host does; the guest
	// (the fake VMM) runs on.
	CodeHangUp = "hang up"
	// PathLongerThanAnnounced is a download announced as 1 byte that
	// streams FloodBytes.
	PathLongerThanAnnounced = "/announced-one-byte"
	// PathHello is a download of the 5 bytes "hello", announced as such.
	PathHello = "/hello"
	// PathStalls is a download announced as 5 bytes that sends one and
	// then nothing, holding the connection open.
	PathStalls = "/stalls"
)

// Sizes of the hostile answers.
const (
	HugeBytes  = 90 << 20
	FloodBytes = 64 << 20
)

// Serve speaks the protocol on nc until the host hangs up, writing what
// the "guest" prints to console. onShutdown, if not nil, is called after a
// shutdown request was answered.
func Serve(nc net.Conn, console io.Writer, onShutdown func()) {
	defer nc.Close()
	c := proto.NewConn(nc, proto.MaxRequest)
	var h proto.Hello
	if c.ReadJSON(proto.TypeHello, &h) != nil {
		return
	}
	if c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version, Software: "hostile-agent"}) != nil {
		return
	}
	for {
		var req proto.Request
		if c.ReadJSON(proto.TypeRequest, &req) != nil {
			return
		}
		if !serve(nc, c, &req, console, onShutdown) {
			return
		}
	}
}

// serve does one request; it reports whether the connection goes on.
func serve(nc net.Conn, c *proto.Conn, req *proto.Request, console io.Writer, onShutdown func()) bool {
	two := &cell.Result{Status: cell.StatusOK, StateKept: true, Results: []cell.Display{{Main: true, Data: map[string]string{cell.MIMEText: "2"}}}}
	switch {
	case req.Op == proto.OpRun && req.Code == CodeHugeResult:
		// Past what any honest Conn writes: build the frames by hand.
		b, _ := json.Marshal(proto.Response{Result: &cell.Result{Status: cell.StatusOK, Stdout: strings.Repeat("A", HugeBytes)}})
		return writeRaw(nc, proto.TypeResponse, b) == nil
	case req.Op == proto.OpRun && req.Code == CodeLongStdout:
		b, _ := json.Marshal(proto.Response{Result: &cell.Result{Status: cell.StatusOK, Stdout: strings.Repeat("B", 2*proto.MaxOutputBytes)}})
		return writeRaw(nc, proto.TypeResponse, b) == nil
	case req.Op == proto.OpRun && req.Code == CodeSilent, req.Op == proto.OpExec && len(req.Argv) > 0 && req.Argv[0] == ArgvSilent:
		io.Copy(io.Discard, nc) // until the host closes the connection
		return false
	case req.Op == proto.OpRun && req.Code == CodeHangUp:
		var hdr [proto.HeaderSize]byte
		binary.BigEndian.PutUint32(hdr[:4], 1+4)
		hdr[4] = byte(proto.TypeEvent | proto.FlagMore)
		nc.Write(append(hdr[:], `{"ev`...))
		return false
	case req.Op == proto.OpRun && req.Code == CodeFloodConsole:
		line := []byte(strings.Repeat("reboot: Power down; Kernel panic - not syncing ", 85) + "\n")
		for n := 0; n < FloodBytes; n += len(line) {
			console.Write(line)
		}
		return c.WriteJSON(proto.TypeResponse, proto.Response{Result: two}) == nil
	case req.Op == proto.OpRun:
		return c.WriteJSON(proto.TypeResponse, proto.Response{Result: two}) == nil
	case req.Op == proto.OpDownload && req.Path == PathLongerThanAnnounced:
		if c.WriteJSON(proto.TypeResponse, proto.Response{File: &proto.FileInfo{Size: 1, Mode: 0o644}}) != nil {
			return false
		}
		chunk := make([]byte, proto.MaxFramePayload)
		for n := 0; n < FloodBytes; n += len(chunk) {
			if c.WriteData(chunk) != nil {
				return false
			}
		}
		return c.WriteDataEnd(nil) == nil
	case req.Op == proto.OpDownload && req.Path == PathHello:
		if c.WriteJSON(proto.TypeResponse, proto.Response{File: &proto.FileInfo{Size: 5, Mode: 0o644}}) != nil {
			return false
		}
		return c.WriteData([]byte("hello")) == nil && c.WriteDataEnd(nil) == nil
	case req.Op == proto.OpDownload && req.Path == PathStalls:
		if c.WriteJSON(proto.TypeResponse, proto.Response{File: &proto.FileInfo{Size: 5, Mode: 0o644}}) != nil || c.WriteData([]byte("h")) != nil {
			return false
		}
		io.Copy(io.Discard, nc) // until the host closes the connection
		return false
	case req.Op == proto.OpExec:
		return c.WriteJSON(proto.TypeResponse, proto.Response{Exec: &cell.ExecResult{}}) == nil
	case req.Op == proto.OpHealth:
		return c.WriteJSON(proto.TypeResponse, proto.Response{Health: &proto.Health{UptimeMS: 1, MemTotalBytes: 1, Procs: 1, Agent: "hostile-agent"}}) == nil
	case req.Op == proto.OpShutdown:
		c.WriteJSON(proto.TypeResponse, proto.Response{})
		if onShutdown != nil {
			onShutdown()
		}
		return false
	}
	return c.WriteJSON(proto.TypeResponse, proto.Response{}) == nil
}

// writeRaw writes b as one JSON message of type t in frames of the
// largest size, with no bound on the whole.
func writeRaw(w io.Writer, t proto.FrameType, b []byte) error {
	for {
		n := min(len(b), proto.MaxFramePayload)
		ft := t
		if n < len(b) {
			ft |= proto.FlagMore
		}
		hdr := make([]byte, proto.HeaderSize, proto.HeaderSize+n)
		binary.BigEndian.PutUint32(hdr, uint32(1+n))
		hdr[4] = byte(ft)
		if _, err := w.Write(append(hdr, b[:n]...)); err != nil {
			return err
		}
		b = b[n:]
		if len(b) == 0 {
			return nil
		}
	}
}
