// Package vsock is virtio-vsock (virtio 1.x, 5.10) with Firecracker's host
// side: guest AF_VSOCK stream sockets are mapped onto host AF_UNIX sockets,
// so host tools written for Firecracker work unchanged.
//
//   - Host to guest: a host process connects to the device's Unix socket and
//     sends "CONNECT <port>\n"; once the guest accepts, it reads
//     "OK <hostport>\n" and the socket carries the stream.
//   - Guest to host: a guest connect to host port P is forwarded to the Unix
//     socket "<uds>_<P>"; nothing listening there means RST.
//
// Flow control is the virtio credit scheme in both directions: the device
// never sends the guest more than its advertised buf_alloc allows, and never
// buffers more from the guest than the buf_alloc it advertised itself (a
// guest that overruns it is reset). Each connection has a reader and a writer
// goroutine for its Unix socket; the rx and tx queues each have one goroutine.
// All connection state is under one session lock, and no socket I/O happens
// while holding it. A connection's life is a state machine after
// Firecracker's (connstate.go): one transition function, which refuses a
// move the protocol does not allow, and the connection is reset.
package vsock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/virtio"
)

// Queue indices and size.
const (
	rxQueue   = 0
	txQueue   = 1
	evQueue   = 2
	QueueSize = 256
)

// Limits that keep one guest's resource use bounded.
const (
	// bufAlloc is the receive buffer each connection advertises to the
	// guest, and so the most guest data it holds for a slow host socket.
	bufAlloc = 256 << 10
	// maxConns bounds live connections per device.
	maxConns = 1024
	// maxPendingRST bounds RSTs waiting for rx buffers, for connections
	// already gone.
	maxPendingRST = 256
	// maxConnectLine bounds the host's "CONNECT <port>\n".
	maxConnectLine = 64
	// firstHostPort is where local ports for host-initiated connections
	// start (Firecracker starts at 2^30 too, well above guest ports).
	firstHostPort = 1 << 30
)

// Timeouts; variables only so tests can shorten them.
var (
	connectLineTimeout = 5 * time.Second
	guestAcceptTimeout = 30 * time.Second
	hostDialTimeout    = 2 * time.Second
)

// Vsock is a virtio-vsock device with a Firecracker-style Unix socket host
// side.
type Vsock struct {
	cid  uint64
	uds  string
	log  *slog.Logger
	ln   *net.UnixListener
	wg   sync.WaitGroup // accept loop and CONNECT handshakes
	stop chan struct{}

	mu        sync.Mutex
	sess      *session // nil unless the driver activated the device
	handshake map[net.Conn]struct{}
	closed    bool
	restored  *State // for the session a restored transport starts
}

// New returns a vsock device for a guest with context ID cid, listening for
// host connections on the Unix socket at uds (which must not exist yet).
func New(cid uint64, uds string, log *slog.Logger) (*Vsock, error) {
	if cid <= HostCID || cid >= 0xffffffff {
		return nil, fmt.Errorf("virtio-vsock: guest CID %d out of range (3 .. 2^32-2)", cid)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: uds, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("virtio-vsock: listen on %s: %w", uds, err)
	}
	v := &Vsock{
		cid: cid, uds: uds, ln: ln,
		log:       ratelog.Wrap(log).With("device", "virtio-vsock", "uds", uds),
		stop:      make(chan struct{}),
		handshake: map[net.Conn]struct{}{},
	}
	v.wg.Add(1)
	go v.acceptLoop()
	return v, nil
}

// DeviceType implements virtio.Device.
func (*Vsock) DeviceType() uint32 { return virtio.TypeVsock }

// Features implements virtio.Device: stream sockets only.
func (*Vsock) Features() uint64 { return 0 }

// QueueMaxSizes implements virtio.Device: rx, tx, event.
func (*Vsock) QueueMaxSizes() []uint16 { return []uint16{QueueSize, QueueSize, QueueSize} }

// ReadConfig implements virtio.Device: the config space is guest_cid (le64).
func (v *Vsock) ReadConfig(off uint64, p []byte) {
	var cfg [8]byte
	binary.LittleEndian.PutUint64(cfg[:], v.cid)
	if off < uint64(len(cfg)) {
		copy(p, cfg[off:])
	}
}

// WriteConfig implements virtio.Device: read-only.
func (*Vsock) WriteConfig(uint64, []byte) {}

// Activate implements virtio.Device.
func (v *Vsock) Activate(a *virtio.Activation) error {
	if len(a.Queues) != 3 || a.Queues[rxQueue] == nil || a.Queues[txQueue] == nil {
		return errors.New("virtio-vsock: rx and tx queues not set up")
	}
	s := newSession(v, a)
	v.mu.Lock()
	if st := v.restored; st != nil {
		s.resetPending, s.resetAvail, s.nextPort = st.ResetPending, st.ResetAvail, st.NextPort
		s.resetAt = time.Now()
		v.restored = nil
	}
	v.sess = s
	v.mu.Unlock()
	s.start()
	return nil
}

// Reset implements virtio.Device: every connection is dropped.
func (v *Vsock) Reset() {
	v.mu.Lock()
	s := v.sess
	v.sess = nil
	v.mu.Unlock()
	if s != nil {
		s.shutdown()
	}
}

// Close stops the device, closes the host socket and removes its file.
func (v *Vsock) Close() error {
	v.Reset()
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.closed = true
	for c := range v.handshake {
		c.Close()
	}
	v.mu.Unlock()
	close(v.stop)
	err := v.ln.Close()
	v.wg.Wait()
	ratelog.Flush(v.log)
	if rmErr := os.Remove(v.uds); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}

func (v *Vsock) acceptLoop() {
	defer v.wg.Done()
	for {
		c, err := v.ln.AcceptUnix()
		if err != nil {
			select {
			case <-v.stop:
				return
			default:
			}
			v.log.Warn("accept", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		v.mu.Lock()
		if v.closed {
			v.mu.Unlock()
			c.Close()
			return
		}
		v.handshake[c] = struct{}{}
		v.wg.Add(1)
		v.mu.Unlock()
		go v.hostConnect(c)
	}
}

// hostConnect reads the "CONNECT <port>\n" line of a host connection and
// hands the connection to the active session.
func (v *Vsock) hostConnect(c *net.UnixConn) {
	defer v.wg.Done()
	port, err := readConnectLine(c, connectLineTimeout)
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.handshake, c)
	if err != nil {
		v.log.Info("host connection rejected", "err", err)
		c.Close()
		return
	}
	if v.sess == nil {
		v.log.Debug("host connection while the guest driver is not running", "port", port)
		c.Close()
		return
	}
	v.sess.hostConnect(c, port)
}

// readConnectLine reads the handshake one byte at a time, so nothing the
// host sent after the newline is consumed, bounded in length and time.
func readConnectLine(c *net.UnixConn, timeout time.Duration) (uint32, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	var line []byte
	var b [1]byte
	for {
		n, err := c.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			if len(line) >= maxConnectLine {
				return 0, fmt.Errorf("CONNECT line longer than %d bytes", maxConnectLine)
			}
		}
		if err != nil {
			return 0, fmt.Errorf("read CONNECT line: %w", err)
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return 0, err
	}
	return parseConnectLine(string(line))
}

func parseConnectLine(line string) (uint32, error) {
	arg, ok := strings.CutPrefix(strings.TrimSuffix(line, "\r"), "CONNECT ")
	if !ok {
		return 0, fmt.Errorf("bad handshake %q: want CONNECT <port>", line)
	}
	port, err := strconv.ParseUint(strings.TrimSpace(arg), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("bad port in %q: %w", line, err)
	}
	return uint32(port), nil
}

// dialHost connects to the listener for guest connections to port.
func (v *Vsock) dialHost(port uint32) (*net.UnixConn, error) {
	d := net.Dialer{Timeout: hostDialTimeout}
	c, err := d.Dial("unix", v.uds+"_"+strconv.FormatUint(uint64(port), 10))
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}
