package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// maxHandshakeLine bounds the VMM's "OK <port>\n" answer.
const maxHandshakeLine = 64

// DefaultHandshakeTimeout bounds the CONNECT handshake when ctx has no
// deadline. A guest answers a connect as soon as its vsock driver runs, but
// a loaded host (many guests, or nested virtualization) can delay that by
// seconds; the caller's deadline, when it has one, is what counts.
const DefaultHandshakeTimeout = 10 * time.Second

// AttemptTimeout bounds one connect attempt of Dial, whose deadline is
// usually the whole boot's.
const AttemptTimeout = 20 * time.Second

// DialVsock connects to guest vsock port through the VMM's Unix socket at
// uds: it writes "CONNECT <port>\n" and reads the "OK <hostport>\n" line,
// after which the connection is a byte stream to the guest's listener.
func DialVsock(ctx context.Context, uds string, port uint32) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", uds)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", uds, err)
	}
	deadline := time.Now().Add(DefaultHandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	nc.SetDeadline(deadline)
	if err := handshake(nc, port); err != nil {
		nc.Close()
		return nil, fmt.Errorf("vsock %s port %d: %w", uds, port, err)
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

func handshake(nc net.Conn, port uint32) error {
	if _, err := fmt.Fprintf(nc, "CONNECT %d\n", port); err != nil {
		return fmt.Errorf("write CONNECT: %w", err)
	}
	// Read byte by byte: nothing after the newline may be consumed.
	var line []byte
	var b [1]byte
	for {
		if _, err := nc.Read(b[:]); err != nil {
			return fmt.Errorf("read handshake answer: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		if len(line) >= maxHandshakeLine {
			return errors.New("handshake answer too long")
		}
		line = append(line, b[0])
	}
	s := string(line)
	if !strings.HasPrefix(s, "OK ") {
		return fmt.Errorf("handshake refused: %q", s)
	}
	return nil
}

// Dial returns a Client for the agent of the VM whose vsock Unix socket is
// uds, retrying until the agent answers a hello or ctx ends: the host
// calls it right after starting the VM. Give ctx a deadline.
func Dial(ctx context.Context, uds string) (*Client, error) {
	return dial(ctx, uds, AttemptTimeout)
}

// dial is Dial with each connect attempt bounded by attempt.
func dial(ctx context.Context, uds string, attempt time.Duration) (*Client, error) {
	c := New(func(ctx context.Context) (net.Conn, error) {
		// One attempt never takes the whole boot deadline: a connect the
		// guest lost (its driver was still starting) is retried, not
		// waited on.
		actx, cancel := context.WithTimeout(ctx, attempt)
		defer cancel()
		return DialVsock(actx, uds, proto.AgentPort)
	})
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// WaitReady opens a connection and does the hello, retrying with a short
// backoff until it works or ctx ends. The connection is kept for the next
// call.
func (c *Client) WaitReady(ctx context.Context) error {
	backoff := 5 * time.Millisecond
	var last error
	for attempt := 1; ; attempt++ {
		s, err := c.open(ctx)
		if err == nil {
			c.put(s)
			return nil
		}
		last = err
		var pe *proto.Error
		if errors.As(err, &pe) && pe.Code == proto.CodeUnsupported {
			return err // retrying will not help
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("agent not ready after %d attempts: %w (last error: %v)", attempt, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(backoff*2, 100*time.Millisecond)
	}
}
