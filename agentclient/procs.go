package agentclient

import (
	"context"
	"fmt"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// Background processes (proto.OpProc). A stream (StartProc, AttachProc)
// has a connection of its own, closed when it ends: a process may run for
// hours, and a pooled connection would be held as long. Hanging up leaves
// the process running in the guest.

// StartProc starts a process and streams its events to onEvent: a start
// event with its pid, its output, then the exit it returns. When ctx ends
// or onEvent fails, the stream is dropped with that error and the process
// goes on. A program that could not start is an exit with Error.
func (c *Client) StartProc(ctx context.Context, req proto.ProcRequest, onEvent func(proto.ProcEvent) error) (proto.ProcExit, error) {
	req.Op = proto.ProcStart
	return c.procStream(ctx, &req, onEvent)
}

// AttachProc streams a running process's backlog, then its output, then
// its exit.
func (c *Client) AttachProc(ctx context.Context, pid int, onEvent func(proto.ProcEvent) error) (proto.ProcExit, error) {
	return c.procStream(ctx, &proto.ProcRequest{Op: proto.ProcAttach, PID: pid}, onEvent)
}

func (c *Client) procStream(ctx context.Context, pr *proto.ProcRequest, onEvent func(proto.ProcEvent) error) (proto.ProcExit, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return proto.ProcExit{}, ErrClosed
	}
	s, err := c.open(ctx)
	if err != nil {
		return proto.ProcExit{}, err
	}
	defer s.nc.Close()
	s.m.begin(ctx)
	defer s.m.settle()
	stop := closeOnDone(ctx, s.nc)
	var cbErr error
	resp, err := func() (proto.Response, error) {
		if err := s.c.WriteJSON(proto.TypeRequest, &proto.Request{Op: proto.OpProc, Proc: pr}); err != nil {
			return proto.Response{}, err
		}
		started := false
		for {
			m, err := s.c.ReadMessage()
			if err != nil {
				return proto.Response{}, err
			}
			switch m.Type {
			case proto.TypeEvent:
				var e proto.ProcEvent
				if err := decode(m.Payload, &e); err != nil {
					return proto.Response{}, err
				}
				if (e.Kind == proto.ProcEventStart) == started {
					return proto.Response{}, fmt.Errorf("%w: process event %s out of order", proto.ErrBadFrame, e.Kind)
				}
				started = true
				if onEvent != nil {
					if cbErr = onEvent(e); cbErr != nil {
						return proto.Response{}, cbErr
					}
				}
			case proto.TypeResponse:
				var r proto.Response
				err := decode(m.Payload, &r)
				return r, err
			default:
				return proto.Response{}, fmt.Errorf("%w: %v frame in a process stream", proto.ErrBadFrame, m.Type)
			}
		}
	}()
	if stop() {
		return proto.ProcExit{}, fmt.Errorf("agent proc %s: %w", pr.Op, ctx.Err())
	}
	if cbErr != nil {
		return proto.ProcExit{}, cbErr
	}
	if err != nil {
		return proto.ProcExit{}, fmt.Errorf("agent proc %s: %w", pr.Op, violation(err))
	}
	if resp.Error != nil {
		return proto.ProcExit{}, resp.Error
	}
	if resp.Proc == nil || resp.Proc.Exit == nil {
		return proto.ProcExit{}, badAnswer(proto.OpProc, "a process stream that ended without an exit")
	}
	return *resp.Proc.Exit, nil
}

// ListProcs lists the running processes.
func (c *Client) ListProcs(ctx context.Context) ([]proto.ProcInfo, error) {
	resp, err := c.procCall(ctx, proto.ProcRequest{Op: proto.ProcList})
	if err != nil {
		return nil, err
	}
	if resp.Proc == nil {
		return nil, badAnswer(proto.OpProc, "a list without processes")
	}
	return resp.Proc.List, nil
}

// ProcInput writes data to a process's stdin or terminal; eof closes it.
func (c *Client) ProcInput(ctx context.Context, pid int, data []byte, eof bool) error {
	if data == nil && !eof {
		return nil
	}
	_, err := c.procCall(ctx, proto.ProcRequest{Op: proto.ProcInput, PID: pid, Data: data, EOF: eof})
	return err
}

// SignalProc sends a signal ("SIGTERM", ...) to a process's group.
func (c *Client) SignalProc(ctx context.Context, pid int, sig string) error {
	_, err := c.procCall(ctx, proto.ProcRequest{Op: proto.ProcSignal, PID: pid, Signal: sig})
	return err
}

// ResizeProc sets the size of a process's terminal.
func (c *Client) ResizeProc(ctx context.Context, pid int, size proto.PTYSize) error {
	_, err := c.procCall(ctx, proto.ProcRequest{Op: proto.ProcResize, PID: pid, PTY: &size})
	return err
}

func (c *Client) procCall(ctx context.Context, pr proto.ProcRequest) (proto.Response, error) {
	return c.do(ctx, proto.Request{Op: proto.OpProc, Proc: &pr}, nil, nil)
}
