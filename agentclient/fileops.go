package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// FileOp runs one of the short file operations (list, stat, mkdir, move,
// remove) and returns the agent's answer, checked against the host's
// bounds (proto.FileReply.Validate).
func (c *Client) FileOp(ctx context.Context, op proto.FileOp) (proto.FileReply, error) {
	if op.Kind == proto.FileWatch || op.Kind == proto.FileDial {
		return proto.FileReply{}, fmt.Errorf("agentclient: file op %s is a stream: use Watch or DialPort", op.Kind)
	}
	resp, err := c.do(ctx, proto.Request{Op: proto.OpFile, File: &op}, nil, nil)
	if err != nil {
		return proto.FileReply{}, err
	}
	if resp.Files == nil {
		return proto.FileReply{}, badAnswer(proto.OpFile, "no file reply")
	}
	return *resp.Files, nil
}

// stream opens a connection of its own for a streaming file op and reads
// the first answer. The session is the caller's to close.
func (c *Client) stream(ctx context.Context, op proto.FileOp) (*session, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	s, err := c.open(ctx)
	if err != nil {
		return nil, err
	}
	s.m.begin(ctx)
	stop := closeOnDone(ctx, s.nc)
	resp, err := func() (proto.Response, error) {
		if err := s.c.WriteJSON(proto.TypeRequest, &proto.Request{Op: proto.OpFile, File: &op}); err != nil {
			return proto.Response{}, err
		}
		return readResponse(s)
	}()
	s.settle()
	if stop() {
		s.nc.Close()
		return nil, fmt.Errorf("agent file %s: %w", op.Kind, ctx.Err())
	}
	if err != nil {
		s.nc.Close()
		return nil, fmt.Errorf("agent file %s: %w", op.Kind, violation(err))
	}
	if resp.Error != nil {
		s.nc.Close()
		return nil, resp.Error
	}
	if resp.Files == nil || len(resp.Files.Entries) > 0 || len(resp.Files.Events) > 0 || resp.Files.Entry != nil || resp.Files.Created != nil {
		s.nc.Close()
		return nil, badAnswer(proto.OpFile, "a stream's first answer is not empty")
	}
	return s, nil
}

// settle releases what the meter charged for the messages read so far.
func (s *session) settle() {
	held, b := s.m.held, s.m.budget
	s.m.held, s.m.charged = 0, 0
	if b != nil {
		b.release(held)
	}
}

// Watch watches op.Path (op.Kind must be proto.FileWatch): once the agent
// has set its watches it calls ready, then onBatch with each batch of
// events until ctx ends (nil), onBatch fails (its error), or the agent
// ends the watch (the directory went away: nil too).
func (c *Client) Watch(ctx context.Context, op proto.FileOp, ready func(), onBatch func([]proto.FileEvent) error) error {
	if op.Kind != proto.FileWatch {
		return fmt.Errorf("agentclient: Watch with file op %s", op.Kind)
	}
	s, err := c.stream(ctx, op)
	if err != nil {
		return err
	}
	defer s.nc.Close()
	stop := closeOnDone(ctx, s.nc)
	defer stop()
	ready()
	for {
		resp, err := readResponse(s)
		s.settle()
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, io.EOF) || isNetErr(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("agent watch: %w", violation(err))
		}
		if resp.Files == nil || len(resp.Files.Events) == 0 {
			return badAnswer(proto.OpFile, "a watch answer without events")
		}
		if err := onBatch(resp.Files.Events); err != nil {
			return err
		}
	}
}

// DialPort connects to TCP port in the guest through the agent. Nothing
// listening there is a *proto.Error with proto.CodePortClosed.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	s, err := c.stream(ctx, proto.FileOp{Kind: proto.FileDial, Port: port})
	if err != nil {
		return nil, err
	}
	return &portConn{s: s, data: s.c.DataReader(-1)}, nil
}

// portConn is a guest TCP connection carried as data frames. Its reads
// come from one goroutine at a time, as net.Conn's users do.
type portConn struct {
	s    *session
	data *proto.DataReader

	wmu       sync.Mutex
	wclosed   bool
	closeOnce sync.Once
}

func (p *portConn) Read(b []byte) (int, error) {
	n, err := p.data.Read(b)
	var pe *proto.Error
	if errors.As(err, &pe) {
		return n, fmt.Errorf("guest port: %s", pe.Message)
	}
	if err != nil && err != io.EOF {
		if isNetErr(err) {
			return n, err
		}
		return n, violation(err)
	}
	return n, err
}

func (p *portConn) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.wclosed {
		return 0, net.ErrClosed
	}
	n := 0
	for len(b) > 0 {
		k := min(len(b), proto.MaxFramePayload)
		if err := p.s.c.WriteData(b[:k]); err != nil {
			return n, err
		}
		n += k
		b = b[k:]
	}
	return n, nil
}

// CloseWrite ends the host's half: the guest's server reads EOF.
func (p *portConn) CloseWrite() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.wclosed {
		return nil
	}
	p.wclosed = true
	return p.s.c.WriteDataEnd(nil)
}

func (p *portConn) Close() error {
	p.closeOnce.Do(func() { p.s.nc.Close() })
	return nil
}

func (p *portConn) LocalAddr() net.Addr                { return p.s.nc.LocalAddr() }
func (p *portConn) RemoteAddr() net.Addr               { return p.s.nc.RemoteAddr() }
func (p *portConn) SetDeadline(t time.Time) error      { return p.s.nc.SetDeadline(t) }
func (p *portConn) SetReadDeadline(t time.Time) error  { return p.s.nc.SetReadDeadline(t) }
func (p *portConn) SetWriteDeadline(t time.Time) error { return p.s.nc.SetWriteDeadline(t) }
