package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxSunPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes including the terminating NUL).
const maxSunPath = 107

// ListenOption changes how ListenUnix guards its socket.
type ListenOption func(*listenConfig)

type listenConfig struct {
	allowed []int
	group   int // -1: none
	log     *slog.Logger
}

// AllowUIDs replaces the set of peer uids whose connections are accepted
// (by default the daemon's own uid and root).
func AllowUIDs(uids ...int) ListenOption {
	return func(c *listenConfig) { c.allowed = slices.Clone(uids) }
}

// AllowGroup lets the members of group gid use the socket too: the socket
// is made mode 0660 and owned by that group, and peers whose primary or
// supplementary groups include gid are accepted.
func AllowGroup(gid int) ListenOption {
	return func(c *listenConfig) { c.group = gid }
}

// WithListenLogger sets where refused connections are logged.
func WithListenLogger(l *slog.Logger) ListenOption {
	return func(c *listenConfig) { c.log = l }
}

// ListenUnix creates the API socket at path with mode 0600 and returns a
// listener that accepts only peers whose SO_PEERCRED uid is allowed.
//
// The socket is never world-accessible, even for a moment and whatever the
// umask: it is bound inside a fresh directory of mode 0700 next to path,
// chmodded to 0600 there, and renamed into place (rename is atomic and a
// bound socket keeps working under its new name). An existing socket at
// path is replaced only if nothing is listening on it (a stale socket left
// by a crash); anything else at path is an error. Closing the listener
// removes the socket, unless it has been replaced by someone else's.
func ListenUnix(path string, opts ...ListenOption) (net.Listener, error) {
	cfg := listenConfig{allowed: []int{os.Getuid(), 0}, group: -1, log: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkStale(path); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(path), ".cellvm-sock-")
	if err != nil {
		return nil, fmt.Errorf("listen %s: making private directory: %w", path, err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	if len(tmp) > maxSunPath || len(path) > maxSunPath {
		return nil, fmt.Errorf("listen %s: socket path too long (at most %d bytes, and the directory needs room for a temporary name)", path, maxSunPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	mode := os.FileMode(0o600)
	if cfg.group >= 0 {
		if err := os.Chown(tmp, -1, cfg.group); err != nil {
			ln.Close()
			return nil, fmt.Errorf("listen %s: giving the socket to group %d: %w", path, cfg.group, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(tmp, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: chmod: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: moving socket into place: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return &peerListener{UnixListener: ln, path: path, fi: fi, cfg: cfg, refusing: make(chan struct{}, maxRefusing)}, nil
}

// checkStale returns nil if path does not exist or is a socket nobody
// listens on.
func checkStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("listen %s: %w", path, err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return fmt.Errorf("listen %s: exists and is not a socket; not replacing it", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("listen %s: another process is listening on it", path)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil
	}
	return fmt.Errorf("listen %s: checking existing socket: %w", path, err)
}

// PeerConn is an accepted connection with its peer's credentials.
type PeerConn struct {
	*net.UnixConn
	Cred syscall.Ucred
}

// maxRefusing bounds the refused connections being answered at once;
// beyond it they are closed without an answer.
const maxRefusing = 16

type peerListener struct {
	*net.UnixListener
	path     string
	fi       os.FileInfo
	cfg      listenConfig
	refusing chan struct{}
}

// Accept returns the next connection from an allowed peer. Connections
// from other peers get a 403 JSON response and are closed.
func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err != nil {
			l.cfg.log.Warn("api: refusing connection: reading SO_PEERCRED", "err", err)
			c.Close()
			continue
		}
		if !slices.Contains(l.cfg.allowed, int(cred.Uid)) && !inGroup(cred, l.cfg.group) {
			l.cfg.log.Warn("api: refusing connection from a uid not allowed", "uid", cred.Uid, "pid", cred.Pid)
			select {
			case l.refusing <- struct{}{}:
				go func() {
					defer func() { <-l.refusing }()
					refuse(c, cred.Uid)
				}()
			default:
				c.Close()
			}
			continue
		}
		return &PeerConn{UnixConn: c, Cred: cred}, nil
	}
}

// Close stops listening and removes the socket if it is still ours.
func (l *peerListener) Close() error {
	err := l.UnixListener.Close()
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.fi) {
		os.Remove(l.path)
	}
	return err
}

func peerCred(c *net.UnixConn) (syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return syscall.Ucred{}, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return syscall.Ucred{}, err
	}
	if cerr != nil {
		return syscall.Ucred{}, cerr
	}
	return *cred, nil
}

// refuse answers a refused peer with a 403 so its client can say why. It
// first reads the request head (bounded in size and time): an answer sent
// before the request would reach an HTTP client as an unsolicited response
// on an idle connection, and be dropped. Then it drains briefly (closing
// with unread data could reset the connection before the answer is read)
// and closes.
func refuse(c *net.UnixConn, uid uint32) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var head []byte
	buf := make([]byte, 4096)
	for len(head) < 64<<10 && !bytes.Contains(head, []byte("\r\n\r\n")) {
		n, err := c.Read(buf)
		head = append(head, buf[:n]...)
		if err != nil {
			return
		}
	}
	body := fmt.Sprintf(`{"error":{"code":%q,"message":"uid %d may not use this socket"}}`+"\n", CodeForbidden, uid)
	fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = c.CloseWrite()
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

type peerKey struct{}

// ConnContext is an http.Server ConnContext that records the peer's
// credentials, for PeerUID and the request log.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if pc, ok := c.(*PeerConn); ok {
		return context.WithValue(ctx, peerKey{}, pc.Cred)
	}
	return ctx
}

// PeerUID returns the uid of the peer of the request with ctx, if known.
func PeerUID(ctx context.Context) (int, bool) {
	cred, ok := ctx.Value(peerKey{}).(syscall.Ucred)
	return int(cred.Uid), ok
}

// NewHTTPServer returns an http.Server for h with the settings the API
// needs: peer credentials in the request context, a bound on slow request
// headers, and no write timeout (cells stream for as long as they run;
// each streamed write has its own deadline).
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

// inGroup reports whether the peer's primary group, or one of the
// supplementary groups of its process, is gid (-1: no group is allowed).
// A peer whose process is gone by now is refused.
func inGroup(cred syscall.Ucred, gid int) bool {
	if gid < 0 {
		return false
	}
	if int(cred.Gid) == gid {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cred.Pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, g := range strings.Fields(rest) {
				if g == strconv.Itoa(gid) {
					return true
				}
			}
		}
	}
	return false
}
