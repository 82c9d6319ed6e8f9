package engine

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// Ports: the guest's agent connects to the port inside the guest and
// carries the bytes over a vsock connection of its own. Each open
// connection holds one of the agent's connections (it serves 64 at once),
// so a sandbox may hold at most maxPortConns: a browser's many keep-alive
// connections cannot starve the sandbox's cells of their agent.

// maxPortConns bounds the open DialPort connections per sandbox.
const maxPortConns = 32

var portConns = struct {
	sync.Mutex
	n map[*vmSandbox]int
}{n: map[*vmSandbox]int{}}

func takePortConn(s *vmSandbox) (release func(), ok bool) {
	portConns.Lock()
	defer portConns.Unlock()
	if portConns.n[s] >= maxPortConns {
		return nil, false
	}
	portConns.n[s]++
	var once sync.Once
	return func() {
		once.Do(func() {
			portConns.Lock()
			defer portConns.Unlock()
			if portConns.n[s]--; portConns.n[s] <= 0 {
				delete(portConns.n, s)
			}
		})
	}, true
}

// DialPort implements Manager. The sandbox is held (no pause, no
// snapshot) only while connecting; the connection ends with the VM (a
// pause ends it too).
func (m *VMManager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port < sandbox.MinPort || port > sandbox.MaxPort {
		return nil, fmt.Errorf("%w: port %d out of %d..%d", sandbox.ErrInvalid, port, sandbox.MinPort, sandbox.MaxPort)
	}
	s, release, err := m.readyHeld(id)
	if err != nil {
		return nil, err
	}
	defer release()
	done, ok := takePortConn(s)
	if !ok {
		return nil, fmt.Errorf("%w: sandbox %s has %d port connections open, the most it may", sandbox.ErrFull, id, maxPortConns)
	}
	c, err := s.agent.DialPort(ctx, port)
	if err != nil {
		done()
		return nil, m.fileErr(s, err)
	}
	return &countedConn{Conn: c, done: done, used: &s.lastUsed}, nil
}

// countedConn gives its place back when closed, and marks its sandbox
// used as bytes pass: traffic on a forwarded port keeps the sandbox from
// its idle timeout, as a cell does, without holding off a pause or a
// snapshot the way a held call would.
type countedConn struct {
	net.Conn
	done func()
	used *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.used.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.used.Store(time.Now().UnixNano())
	}
	return n, err
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.done()
	return err
}

// CloseWrite passes the half-close on.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
