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
// (or restores), and keep it for the VM's life. The first connection that
// brings a line starting with proto.ReadyPrefix, within readyLineTimeout
// and proto.MaxReadyLine bytes, is the signal: Ready is closed. The
// listener then holds that connection and goes on listening: a snapshot
// resets every vsock connection of the running VM, whose agent announces
// itself again at once, and the new connection replaces the old one. Were
// nobody listening, the agent would retry with its backoff for the rest
// of its life, and a later snapshot would catch it asleep, so that a fork
// from it would wait for the fallback poll. Anything else a connection
// brings is dropped with it; after maxReadyConns such connections in a
// row the listener stops. The line is trusted no further than "something
// answered".
type ReadyListener struct {
	ln    *net.UnixListener
	ready chan struct{}
	done  chan struct{} // the accept loop has returned

	mu        sync.Mutex
	conn      net.Conn // the latest ready connection, held until Close
	reading   net.Conn // the connection being read, for Close
	signalled bool
	closed    bool
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

// Close stops listening, removes the socket, and closes the connection it
// holds. It waits for the accept loop, and may be called more than once.
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
	for bad := 0; bad < maxReadyConns; {
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
			closed := r.closed
			r.mu.Unlock()
			nc.Close()
			if closed {
				return
			}
			bad++
			continue
		}
		bad = 0
		if r.conn != nil {
			r.conn.Close() // the agent's earlier connection, which a reset ended
		}
		r.conn = nc
		if !r.signalled {
			r.signalled = true
			close(r.ready)
		}
		r.mu.Unlock()
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
