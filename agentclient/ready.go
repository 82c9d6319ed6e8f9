package agentclient

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// readyLineTimeout bounds the wait for a ready connection's line;
// maxReadyConns bounds the connections a ReadyListener looks at before it
// gives up (the caller's fallback poll still finds the agent). Variables
// so tests can shorten them.
var (
	readyLineTimeout = 5 * time.Second
	maxReadyConns    = 16
)

// ReadyListener is the host's end of the agent's ready signal
// (proto.ReadyPort): a Unix socket at "<vsock uds>_<ReadyPort>", where the
// VMM connects the agent's announcement. Open it before the VMM starts
// (or restores). The first connection that brings a line starting with
// proto.ReadyPrefix, within readyLineTimeout and proto.MaxReadyLine bytes,
// is the signal: Ready is closed, the listener is closed (its socket
// removed), and the connection is kept for Take. Anything else a
// connection brings is dropped with it; the line is trusted no further
// than "something answered".
type ReadyListener struct {
	ln    *net.UnixListener
	ready chan struct{}
	done  chan struct{} // the accept loop has returned

	mu      sync.Mutex
	conn    net.Conn // the signal's connection, until Take
	reading net.Conn // the connection being read, for Close
	closed  bool
}

// ListenReady listens for the ready signal at path, replacing a stale
// socket there. The socket is owner-only; uid and gid (-1: the daemon's)
// give it to a jailed VMM's user, who must be able to connect.
func ListenReady(path string, uid, gid int) (*ReadyListener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("ready socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("ready socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err == nil && (uid >= 0 || gid >= 0) {
		err = os.Chown(path, uid, gid)
	}
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("ready socket: %w", err)
	}
	r := &ReadyListener{ln: ln, ready: make(chan struct{}), done: make(chan struct{})}
	go r.accept()
	return r, nil
}

// Ready is closed when the signal has arrived.
func (r *ReadyListener) Ready() <-chan struct{} { return r.ready }

// Take returns the signal's connection, now the caller's to close, or nil
// (no signal, or taken).
func (r *ReadyListener) Take() net.Conn {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.conn
	r.conn = nil
	return c
}

// Close stops listening, removes the socket, and closes a connection not
// taken. It waits for the accept loop, and may be called more than once.
func (r *ReadyListener) Close() error {
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	if r.reading != nil {
		r.reading.Close()
	}
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
	r.mu.Unlock()
	if first {
		r.ln.Close()
	}
	<-r.done
	return nil
}

func (r *ReadyListener) accept() {
	defer close(r.done)
	defer r.ln.Close()
	for range maxReadyConns {
		nc, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			nc.Close()
			return
		}
		r.reading = nc
		r.mu.Unlock()
		ok := readReadyLine(nc)
		r.mu.Lock()
		r.reading = nil
		if !ok || r.closed {
			r.mu.Unlock()
			nc.Close()
			continue
		}
		r.conn = nc
		close(r.ready)
		r.mu.Unlock()
		return
	}
}

// readReadyLine reads nc's first line, bounded in length and time, and
// reports whether it is a ready line. Bytes after it are left unread.
func readReadyLine(nc net.Conn) bool {
	nc.SetReadDeadline(time.Now().Add(readyLineTimeout))
	defer nc.SetReadDeadline(time.Time{})
	var buf [proto.MaxReadyLine]byte
	n := 0
	for n < len(buf) {
		m, err := nc.Read(buf[n:])
		if i := bytes.IndexByte(buf[n:n+m], '\n'); i >= 0 {
			return bytes.HasPrefix(buf[:n+i], []byte(proto.ReadyPrefix))
		}
		n += m
		if err != nil {
			return false
		}
	}
	return false
}
