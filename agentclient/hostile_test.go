package agentclient

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agentclient/hostileagent"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// countingConn counts the bytes the client reads from the agent.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// serveHostile returns a Client of a hostile agent and the count of bytes
// the client has read from it.
func serveHostile(t *testing.T) (*Client, *atomic.Int64) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go hostileagent.Serve(nc, nil, nil)
		}
	}()
	var read atomic.Int64
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "unix", sock)
		if err != nil {
			return nil, err
		}
		return countingConn{nc, &read}, nil
	})
	t.Cleanup(func() { c.Close(); ln.Close() })
	return c, &read
}

// slack is what the client may read past a bound before it notices: the
// frame that crosses it and its read-ahead buffer.
const slack = proto.MaxFramePayload + proto.HeaderSize + 64<<10

// TestHugeResultIsAProtocolViolation: a result message past the host's
// bound is refused as a protocol violation, having read no more than the
// bound, and the client still works on a fresh connection.
func TestHugeResultIsAProtocolViolation(t *testing.T) {
	c, read := serveHostile(t)
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	before := read.Load()
	_, err := c.RunCell(ctxT(t), hostileagent.CodeHugeResult, time.Minute, nil)
	if !errors.Is(err, ErrProtocol) || !errors.Is(err, proto.ErrMessageTooLarge) {
		t.Fatalf("RunCell of a %d-byte result = %v, want ErrProtocol (message too large)", hostileagent.HugeBytes, err)
	}
	if n := read.Load() - before; n > proto.MaxAgentMessage+slack {
		t.Errorf("read %d bytes of a %d-byte message bounded at %d", n, hostileagent.HugeBytes, proto.MaxAgentMessage)
	}
	if r, err := c.RunCell(ctxT(t), hostileagent.CodeOK, time.Minute, nil); err != nil || r.Status != cell.StatusOK {
		t.Fatalf("next cell on a fresh connection: %+v, %v", r, err)
	}
}

// TestLongStdoutIsAProtocolViolation: a message of ordinary size whose
// result passes the host's own bound on output (not the guest's clip) is
// refused the same way.
func TestLongStdoutIsAProtocolViolation(t *testing.T) {
	c, _ := serveHostile(t)
	_, err := c.RunCell(ctxT(t), hostileagent.CodeLongStdout, time.Minute, nil)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("RunCell of a result with %d bytes of stdout = %v, want ErrProtocol", 2*proto.MaxOutputBytes, err)
	}
}

// TestDownloadStopsAtTheAnnouncedSize: a download that streams 64 MiB after
// announcing 1 byte writes at most that byte, reads little past it, and
// is a protocol violation.
func TestDownloadStopsAtTheAnnouncedSize(t *testing.T) {
	c, read := serveHostile(t)
	var got bytes.Buffer
	n, err := c.Download(ctxT(t), hostileagent.PathLongerThanAnnounced, &got, 1<<40)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("Download = %d, %v, want ErrProtocol", n, err)
	}
	if got.Len() > 1 || n > 1 {
		t.Errorf("wrote %d bytes (returned %d) of a download announced as 1 byte", got.Len(), n)
	}
	if r := read.Load(); r > 1+slack+4096 {
		t.Errorf("read %d bytes from a download announced as 1 byte", r)
	}
}

// TestDownloadStopsAtTheLimit: a file announced as larger than the
// caller's limit is refused before a byte is written.
func TestDownloadStopsAtTheLimit(t *testing.T) {
	c, _ := serveHostile(t)
	var got bytes.Buffer
	if _, err := c.Download(ctxT(t), hostileagent.PathHello, &got, 4); !errors.Is(err, ErrTooLarge) || got.Len() != 0 {
		t.Fatalf("5-byte download with a limit of 4: %v, wrote %d bytes; want ErrTooLarge and nothing written", err, got.Len())
	}
	if n, err := c.Download(ctxT(t), hostileagent.PathHello, &got, 5); err != nil || n != 5 || got.String() != "hello" {
		t.Fatalf("5-byte download with a limit of 5: %d, %v, %q", n, err, got.String())
	}
}

// TestSilentAgentHonoursTheCallersDeadline: the client itself never waits
// past its context for an agent that does not answer (the manager gives
// every call such a deadline).
func TestSilentAgentHonoursTheCallersDeadline(t *testing.T) {
	c, _ := serveHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.RunCell(ctx, hostileagent.CodeSilent, 0, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RunCell on a silent agent = %v, want DeadlineExceeded", err)
	}
	if _, err := c.Exec(ctx, []string{hostileagent.ArgvSilent}, nil, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Exec on a silent agent = %v, want DeadlineExceeded", err)
	}
}

// TestStalledDownloadEnds: a guest that stops in the middle of a download
// does not hold the caller: the transfer ends once nothing came for the
// stall timeout.
func TestStalledDownloadEnds(t *testing.T) {
	c, _ := serveHostile(t)
	c.stall = 200 * time.Millisecond
	var got bytes.Buffer
	_, err := c.Download(ctxT(t), hostileagent.PathStalls, &got, 1<<20)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || errors.Is(err, ErrProtocol) {
		t.Fatalf("stalled download: %v, want a timeout (not a protocol violation)", err)
	}
	if got.String() != "h" {
		t.Errorf("wrote %q before the stall, want the one byte sent", got.String())
	}
	if _, err := c.Health(ctxT(t)); err != nil {
		t.Fatalf("the client after a stalled download: %v", err)
	}
}

// TestReadFailuresAreNotViolations: a read that fails in the middle of a
// frame (here a deadline) is not taken for a malformed frame.
func TestReadFailuresAreNotViolations(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go b.Write([]byte{0, 0, 0, 9, byte(proto.TypeData), 'x'}) // 8 payload bytes announced, 1 sent
	a.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, err := proto.NewConn(a, 0).ReadMessage()
	if err == nil || errors.Is(violation(err), ErrProtocol) {
		t.Fatalf("a frame cut by a read deadline: %v, classified as a protocol violation", err)
	}
}
