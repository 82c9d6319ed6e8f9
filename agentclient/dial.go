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
	// A cancelled ctx ends the handshake too, not only its deadline.
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	err = handshake(nc, port)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
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
	c := New(agentDialer(uds, attempt))
	if err := c.WaitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// agentDialer dials the agent through the VMM's socket uds, each attempt
// bounded by attempt: one never takes the whole boot deadline, so a
// connect the guest lost (its driver was still starting) is retried, not
// waited on.
func agentDialer(uds string, attempt time.Duration) DialFunc {
	return func(ctx context.Context) (net.Conn, error) {
		actx, cancel := context.WithTimeout(ctx, attempt)
		defer cancel()
		return DialVsock(actx, uds, proto.AgentPort)
	}
}

// DialSignalled is Dial for a VM whose agent announces itself on ready
// (a ReadyListener's Ready): it dials once the signal arrives, and
// meanwhile tries once every fallback, for an agent that never signals (a
// snapshot made by an older one). A try in flight when the signal arrives
// is abandoned for a fresh dial. After the signal, a failed dial is retried
// as WaitReady does: the agent says it listens.
func DialSignalled(ctx context.Context, uds string, ready <-chan struct{}, fallback time.Duration) (*Client, error) {
	c := New(agentDialer(uds, AttemptTimeout))
	if err := c.waitSignalled(ctx, ready, fallback); err != nil {
		return nil, err
	}
	return c, nil
}

// waitSignalled is DialSignalled's wait, over c's dialer.
func (c *Client) waitSignalled(ctx context.Context, ready <-chan struct{}, fallback time.Duration) error {
	t := time.NewTimer(fallback)
	defer t.Stop()
	tries := 0
	var last error
	for {
		select {
		case <-ready:
			return c.WaitReady(ctx)
		case <-ctx.Done():
			return fmt.Errorf("agent not ready (no signal, %d tries): %w (last error: %v)", tries, ctx.Err(), last)
		case <-t.C:
		}
		tries++
		actx, cancel := context.WithCancel(ctx)
		stop := make(chan struct{})
		go func() {
			select {
			case <-ready:
				cancel()
			case <-stop:
			}
		}()
		final, err := c.try(actx)
		close(stop)
		cancel()
		if err == nil || final {
			return err
		}
		last = err
		t.Reset(fallback)
	}
}

// WaitReady opens a connection and does the hello, retrying with a short
// backoff until it works or ctx ends. The connection is kept for the next
// call.
func (c *Client) WaitReady(ctx context.Context) error {
	backoff := 5 * time.Millisecond
	var last error
	for attempt := 1; ; attempt++ {
		final, err := c.try(ctx)
		if err == nil || final {
			return err
		}
		last = err
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

// try opens a connection and does the hello, keeping the connection. An
// error is final when retrying will not help (the agent does not speak
// this version).
func (c *Client) try(ctx context.Context) (final bool, err error) {
	start := time.Now()
	s, err := c.open(ctx)
	c.record(start, err)
	if err == nil {
		c.put(s)
		return false, nil
	}
	var pe *proto.Error
	return errors.As(err, &pe) && pe.Code == proto.CodeUnsupported, err
}

// Try is one connection attempt of a wait for the agent: when it started,
// how long it took, and how it failed ("" for the one that answered).
type Try struct {
	Start time.Time
	Took  time.Duration
	Err   string
}

// maxTries bounds the attempts a Client remembers.
const maxTries = 8

func (c *Client) record(start time.Time, err error) {
	t := Try{Start: start, Took: time.Since(start)}
	if err != nil {
		t.Err = err.Error()
		if len(t.Err) > 200 {
			t.Err = t.Err[:200]
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tries) == maxTries {
		c.tries = append(c.tries[:0], c.tries[1:]...)
	}
	c.tries = append(c.tries, t)
}

// Tries returns the last attempts (at most 8) the wait for the agent made,
// oldest first: what a slow start spent its time on.
func (c *Client) Tries() []Try {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Try(nil), c.tries...)
}
