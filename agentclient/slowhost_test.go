package agentclient

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/agent"
)

// slowConn is a host that reads steadily but slowly: 64 KiB every 15 ms.
type slowConn struct{ net.Conn }

func (c slowConn) Read(p []byte) (int, error) {
	time.Sleep(15 * time.Millisecond)
	return c.Conn.Read(p[:min(len(p), 64<<10)])
}

// TestSlowHostGetsItsLargeResult: the agent's WriteTimeout bounds a
// stall, not a whole message. A 3 MiB cell (its stdout event, result
// event and result: ~5 MiB; stdout is clipped to 1 MiB) read by a host that takes ~2 s for it, under
// a 500 ms WriteTimeout, comes back whole. With the deadline set once per
// message, the agent gave up on its first event and the host saw EOF.
func TestSlowHostGetsItsLargeResult(t *testing.T) {
	srv := agent.NewServer(agent.Config{Interp: newFake(), Logger: quiet(), WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { srv.Close() })
	c := New(func(ctx context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		go srv.ServeConn(b)
		return slowConn{a}, nil
	})
	t.Cleanup(func() { c.Close() })
	code := strings.Repeat("x", 3<<20)
	start := time.Now()
	res, err := c.RunCell(ctxT(t), code, time.Minute, nil)
	if err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	if res.Status != cell.StatusOK || res.Stdout == "" || res.MainResult() == nil || len(res.MainResult().Data[cell.MIMEText]) != len(code) {
		t.Fatalf("result: status %s, stdout %d bytes, main %v", res.Status, len(res.Stdout), res.MainResult() != nil)
	}
	if d := time.Since(start); d < time.Second {
		t.Fatalf("the host read it in %v: too fast to show anything", d)
	}
}
