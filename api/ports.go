package api

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
)

// GET /v1/sandboxes/{id}/ports/{port} with "Connection: Upgrade" and
// "Upgrade: tcp" connects to a TCP port a process in the sandbox listens
// on and, once connected, answers 101 and carries the connection's bytes
// both ways (`cellvm port-forward`). Nothing listening is 502
// (port_closed) before any upgrade, so a client sees a clear error.

// PortUpgrade is the Upgrade token of the port route.
const PortUpgrade = "tcp"

// CodePortClosed is the error code of a port nothing listens on (502).
const CodePortClosed = "port_closed"

func (s *server) dialPort(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < sandbox.MinPort || port > sandbox.MaxPort {
		s.writeError(w, fmt.Errorf("%w: port %q is not a number in %d..%d", sandbox.ErrInvalid, clipString(r.PathValue("port"), 32), sandbox.MinPort, sandbox.MaxPort))
		return
	}
	AuditOf(r.Context()).Set(func(rec *audit.Record) { rec.Path = "port:" + strconv.Itoa(port) })
	if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", PortUpgrade) {
		s.writeError(w, fmt.Errorf("%w: the port route upgrades the connection: send Connection: Upgrade and Upgrade: %s", sandbox.ErrInvalid, PortUpgrade))
		return
	}
	guest, err := s.m.DialPort(r.Context(), r.PathValue("id"), port)
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer guest.Close()
	ae := AuditOf(r.Context())
	ae.Stream()
	ae.Commit()
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.writeError(w, fmt.Errorf("%w: this connection cannot be upgraded (HTTP/2?): %v", sandbox.ErrNotSupported, err))
		return
	}
	defer nc.Close()
	nc.SetDeadline(time.Time{})
	if _, err := io.WriteString(nc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+PortUpgrade+"\r\n\r\n"); err != nil {
		return
	}
	splice(nc, io.MultiReader(brw.Reader, nc), guest)
}

// splice copies client's bytes (read from in) to guest and guest's to
// client, each direction half-closed at its end, until both are done.
func splice(client net.Conn, in io.Reader, guest net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		io.Copy(guest, in)
		if cw, ok := guest.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			guest.Close()
		}
	}()
	if _, err := io.Copy(client, guest); err != nil {
		client.Close() // the guest's side failed: nothing more will come
	}
	if cw, ok := client.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	} else {
		client.Close()
	}
	wg.Wait()
}

// headerHas reports whether the comma-separated header name holds token
// (case-insensitive).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
