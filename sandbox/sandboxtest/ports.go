package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/cellvm/cellvm/sandbox"
)

// Ports of the fake: a test serves a "guest port" with ListenPort (an
// http.Server can Serve the listener), and DialPort hands it the server
// end of a net.Pipe. A port nobody listens on is ErrPortClosed.

type portKey struct {
	m    *Manager
	id   string
	port int
}

var ports = struct {
	sync.Mutex
	by map[portKey]*portListener
}{by: map[portKey]*portListener{}}

// ListenPort makes port of sandbox id reachable through DialPort until
// the listener is closed.
func (m *Manager) ListenPort(id string, port int) (net.Listener, error) {
	if err := m.withBox(id, func(*box) error { return nil }); err != nil {
		return nil, err
	}
	k := portKey{m, id, port}
	ports.Lock()
	defer ports.Unlock()
	if ports.by[k] != nil {
		return nil, fmt.Errorf("port %d of %s is taken", port, id)
	}
	l := &portListener{key: k, conns: make(chan net.Conn), done: make(chan struct{})}
	ports.by[k] = l
	return l, nil
}

func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if err := m.enter("DialPort", id, fmt.Sprint(port)); err != nil {
		return nil, err
	}
	if port < sandbox.MinPort || port > sandbox.MaxPort {
		return nil, fmt.Errorf("%w: port %d out of %d..%d", sandbox.ErrInvalid, port, sandbox.MinPort, sandbox.MaxPort)
	}
	if err := m.withBox(id, func(*box) error { return nil }); err != nil {
		return nil, err
	}
	ports.Lock()
	l := ports.by[portKey{m, id, port}]
	ports.Unlock()
	if l == nil {
		return nil, fmt.Errorf("%w: port %d", sandbox.ErrPortClosed, port)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
		client.Close()
		server.Close()
		return nil, ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, fmt.Errorf("%w: port %d", sandbox.ErrPortClosed, port)
}

type portListener struct {
	key   portKey
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *portListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *portListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		ports.Lock()
		if ports.by[l.key] == l {
			delete(ports.by, l.key)
		}
		ports.Unlock()
	})
	return nil
}

func (l *portListener) Addr() net.Addr { return fakeAddr(fmt.Sprintf("%s:%d", l.key.id, l.key.port)) }

type fakeAddr string

func (a fakeAddr) Network() string { return "fake" }
func (a fakeAddr) String() string  { return string(a) }
