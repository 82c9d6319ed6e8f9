package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// DialFunc opens a byte stream to the agent.
type DialFunc func(ctx context.Context) (net.Conn, error)

// maxIdle is how many idle connections a Client keeps.
const maxIdle = 2

// Client talks to one agent. It is safe for concurrent use.
type Client struct {
	dial DialFunc
	// Software names the client in the hello.
	software string
	// stall bounds the wait for the next piece of a transfer (see
	// StallTimeout).
	stall time.Duration

	mu     sync.Mutex
	idle   []*session
	closed bool
	budget *Budget // nil: the default budget (SetDefaultBudget)
	tries  []Try   // the last maxTries of the first wait (WaitReady, DialSignalled)
}

// New returns a Client that opens connections with dial.
func New(dial DialFunc) *Client {
	return &Client{dial: dial, software: "cellvm-agentclient", stall: StallTimeout}
}

// Close closes the idle connections; calls in flight keep theirs.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, s := range c.idle {
		s.nc.Close()
	}
	c.idle = nil
	return nil
}

// StallTimeout bounds how long an upload or a download waits for the
// guest to take or send its next piece: a transfer has no deadline of its
// own (a large file takes long), but a guest that stops in the middle
// does not hold the caller forever.
const StallTimeout = time.Minute

// stallReader refreshes the connection's read deadline before each read.
type stallReader struct {
	r     io.Reader
	nc    net.Conn
	stall time.Duration
}

func (s stallReader) Read(p []byte) (int, error) {
	s.nc.SetReadDeadline(time.Now().Add(s.stall))
	return s.r.Read(p)
}

// ErrClosed is returned by calls on a closed Client.
var ErrClosed = errors.New("agentclient: client closed")

// ErrProtocol marks an agent that broke the protocol: a malformed or
// oversized frame or message, a message past the host's bounds
// (proto.MaxAgentMessage and the result bounds that Response.Validate
// checks), a download longer than announced, an answer that is not the
// one asked for. The guest controls the agent, so callers treat this as a
// hostile guest, not a hiccup: nothing more from it is read. A stream that
// merely ends early (the VM went down) is not a violation.
var ErrProtocol = errors.New("the guest broke the agent protocol")

// ErrTooLarge marks a download larger than the caller's limit; nothing of
// it was written.
var ErrTooLarge = errors.New("larger than the host's limit")

// violation wraps err with ErrProtocol if it says the agent sent something
// malformed, rather than that its stream ended.
func violation(err error) error {
	if errors.Is(err, ErrProtocol) || errors.Is(err, io.ErrUnexpectedEOF) {
		return err
	}
	for _, e := range []error{proto.ErrBadFrame, proto.ErrMessageTooLarge, proto.ErrFrameTooLarge, proto.ErrUnknownType} {
		if errors.Is(err, e) {
			return fmt.Errorf("%w: %w", ErrProtocol, err)
		}
	}
	return err
}

// badAnswer is an answer of the right frame type that lacks what the
// request asks for.
func badAnswer(op proto.Op, what string) error {
	return fmt.Errorf("agent %s: %w: %s", op, ErrProtocol, what)
}

type session struct {
	nc    net.Conn
	c     *proto.Conn
	m     *meter
	agent string
}

// open dials and does the hello.
func (c *Client) open(ctx context.Context) (*session, error) {
	nc, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	m := &meter{r: nc, budget: c.currentBudget(), max: proto.MaxAgentMessage}
	s := &session{nc: nc, m: m, c: proto.NewConn(struct {
		io.Reader
		io.Writer
	}{m, nc}, proto.MaxAgentMessage)}
	m.begin(ctx)
	stop := closeOnDone(ctx, nc)
	err = s.hello(c.software)
	if stop() {
		// ctx ended and nc is closed, whether or not the hello got
		// through first: a closed connection must not reach the pool.
		if err != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		} else {
			err = fmt.Errorf("hello: %w (the connection was closed as it answered)", ctx.Err())
		}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return s, nil
}

func (s *session) hello(software string) error {
	s.nc.SetDeadline(time.Now().Add(10 * time.Second))
	defer s.nc.SetDeadline(time.Time{})
	if err := s.c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version, Software: software}); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	m, err := s.c.ReadMessage()
	if err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	switch m.Type {
	case proto.TypeHello:
		var h proto.Hello
		if err := proto.DecodeJSON(m.Payload, &h); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		if h.Version != proto.Version {
			return fmt.Errorf("hello: agent answered version %d, want %d", h.Version, proto.Version)
		}
		s.agent = h.Software
		return nil
	case proto.TypeResponse:
		var r proto.Response
		if err := proto.DecodeJSON(m.Payload, &r); err != nil {
			return fmt.Errorf("hello: %w", err)
		}
		if r.Error != nil {
			return r.Error
		}
	}
	return fmt.Errorf("hello: unexpected %v frame", m.Type)
}

// get returns an idle connection or opens one.
func (c *Client) get(ctx context.Context) (*session, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(c.idle); n > 0 {
		s := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return s, nil
	}
	c.mu.Unlock()
	return c.open(ctx)
}

// put returns a healthy connection to the pool.
func (c *Client) put(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.idle) >= maxIdle {
		s.nc.Close()
		return
	}
	c.idle = append(c.idle, s)
}

// closeOnDone closes nc when ctx ends before stop is called; stop reports
// whether it did.
func closeOnDone(ctx context.Context, nc net.Conn) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return false }
	}
	done := make(chan struct{})
	fired := make(chan bool, 1)
	go func() {
		select {
		case <-ctx.Done():
			nc.Close()
			fired <- true
		case <-done:
			fired <- false
		}
	}()
	return func() bool {
		close(done)
		return <-fired
	}
}

// do runs one request: send writes the request (and any data stream),
// recv reads up to and including the response. A connection that saw any
// error is closed rather than reused.
func (c *Client) do(ctx context.Context, req proto.Request, send func(*session) error, recv func(*session) (proto.Response, error)) (proto.Response, error) {
	resp, settle, err := c.call(ctx, req, send, recv)
	settle()
	return resp, err
}

// call is do that leaves the answer's charge to the budget held: the
// caller calls settle when it is done with the answer.
func (c *Client) call(ctx context.Context, req proto.Request, send func(*session) error, recv func(*session) (proto.Response, error)) (_ proto.Response, settle func(), _ error) {
	s, err := c.get(ctx)
	if err != nil {
		return proto.Response{}, func() {}, err
	}
	s.m.begin(ctx)
	stop := closeOnDone(ctx, s.nc)
	reuse := true
	resp, err := func() (proto.Response, error) {
		if err := s.c.WriteJSON(proto.TypeRequest, &req); err != nil {
			return proto.Response{}, err
		}
		var sendErr error
		if send != nil {
			sendErr = send(s)
		}
		if recv == nil {
			recv = readResponse
		}
		resp, err := recv(s)
		if err != nil && sendErr != nil {
			return proto.Response{}, sendErr
		}
		if sendErr != nil {
			reuse = false // the stream is in an unknown state
		}
		return resp, err
	}()
	// The charge leaves with the answer, before the session goes back to
	// the pool: it may serve another call before the caller is done.
	held, b := s.m.held, s.m.budget
	s.m.held, s.m.charged = 0, 0
	settle = func() {
		if b != nil {
			b.release(held)
		}
	}
	cancelled := stop()
	if cancelled {
		return proto.Response{}, settle, fmt.Errorf("agent %s: %w", req.Op, ctx.Err())
	}
	if err != nil {
		s.nc.Close()
		return proto.Response{}, settle, fmt.Errorf("agent %s: %w", req.Op, violation(err))
	}
	if resp.Error != nil && (resp.Error.Code == proto.CodeBadRequest || resp.Error.Code == proto.CodeTooLarge) {
		reuse = false // the agent hangs up after these
	}
	if reuse {
		c.put(s)
	} else {
		s.nc.Close()
	}
	if resp.Error != nil {
		return resp, settle, resp.Error
	}
	return resp, settle, nil
}

func readResponse(s *session) (proto.Response, error) {
	var r proto.Response
	m, err := s.c.ReadMessage()
	if err != nil {
		return r, err
	}
	if m.Type != proto.TypeResponse {
		return r, fmt.Errorf("%w: got a %v frame, want %v", proto.ErrBadFrame, m.Type, proto.TypeResponse)
	}
	return r, decode(m.Payload, &r)
}

// RunCell runs code in the persistent Python interpreter (the default
// session); see RunSessionCell.
func (c *Client) RunCell(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	return c.RunSessionCell(ctx, Session{}, code, timeout, onEvent)
}

// RunSessionCell runs code in session sess (created by the guest on first
// use). onEvent (may be nil) receives the streamed events, then an end
// event with the result. A timeout <= 0 means none. Cancelling ctx closes
// the connection, which interrupts the cell.
func (c *Client) RunSessionCell(ctx context.Context, sess Session, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error) {
	if onEvent == nil {
		onEvent = func(cell.Event) {}
	}
	lang, name := sess.wire()
	req := proto.Request{Op: proto.OpRun, Code: code, TimeoutMS: timeout.Milliseconds(), Language: lang, Context: name}
	dropped := 0
	resp, settle, err := c.call(ctx, req, nil, func(s *session) (proto.Response, error) {
		for {
			m, err := s.c.ReadMessage()
			dropped = s.m.dropped
			if err != nil {
				return proto.Response{}, err
			}
			switch m.Type {
			case proto.TypeEvent:
				var e proto.Event
				if err := decode(m.Payload, &e); err != nil {
					return proto.Response{}, err
				}
				onEvent(e.Event)
			case proto.TypeResponse:
				var r proto.Response
				if err := decode(m.Payload, &r); err != nil {
					return proto.Response{}, err
				}
				return r, nil
			default:
				return proto.Response{}, fmt.Errorf("%w: %v frame while a cell runs", proto.ErrBadFrame, m.Type)
			}
		}
	})
	// The result stays charged to the budget until it is handed over.
	defer settle()
	var ref *refusal
	if errors.As(err, &ref) && ctx.Err() == nil {
		r := ref.result()
		onEvent(cell.Event{Type: cell.EventEnd, End: &r})
		return r, nil
	}
	if err != nil {
		return cell.Result{}, err
	}
	if resp.Result == nil {
		return cell.Result{}, badAnswer(proto.OpRun, "response without a result")
	}
	if dropped > 0 {
		resp.Result.Stderr += fmt.Sprintf("\ncellvm: %d rich results streamed while the cell ran were not passed on: the daemon's memory for results was in use (%s); this result holds them\n", dropped, DaemonBusy)
	}
	onEvent(cell.Event{Type: cell.EventEnd, End: resp.Result})
	return *resp.Result, nil
}

// Interrupt interrupts the running cell and reports whether one was
// running.
func (c *Client) Interrupt(ctx context.Context) (bool, error) {
	resp, err := c.do(ctx, proto.Request{Op: proto.OpInterrupt}, nil, nil)
	if err != nil {
		return false, err
	}
	if resp.Interrupted == nil {
		return false, badAnswer(proto.OpInterrupt, "no answer")
	}
	return *resp.Interrupted, nil
}

// Restart replaces the Python interpreter (the default session) with a
// fresh one; see RestartSession.
func (c *Client) Restart(ctx context.Context) error {
	return c.RestartSession(ctx, Session{})
}

// SetEnv sets the environment variables of the guest's interpreter and
// commands (a sandbox's env). Send it before the first cell: an
// interpreter already running is started afresh to see them.
func (c *Client) SetEnv(ctx context.Context, env map[string]string) error {
	_, err := c.do(ctx, proto.Request{Op: proto.OpSetEnv, Env: env}, nil, nil)
	return err
}

// Exec runs argv (no shell) in the guest. stdin may be nil; timeout <= 0
// means none.
func (c *Client) Exec(ctx context.Context, argv []string, stdin []byte, timeout time.Duration) (cell.ExecResult, error) {
	resp, err := c.do(ctx, proto.Request{Op: proto.OpExec, Argv: argv, Stdin: stdin, TimeoutMS: timeout.Milliseconds()}, nil, nil)
	if err != nil {
		return cell.ExecResult{}, err
	}
	if resp.Exec == nil {
		return cell.ExecResult{}, badAnswer(proto.OpExec, "response without a result")
	}
	return *resp.Exec, nil
}

// Upload writes r's bytes to the guest's absolute path name with mode
// (permission bits; 0: 0644), replacing the file atomically, and returns
// the number of bytes written.
func (c *Client) Upload(ctx context.Context, name string, r io.Reader, mode uint32) (int64, error) {
	send := func(s *session) error {
		buf := make([]byte, proto.MaxFramePayload)
		for {
			n, rerr := r.Read(buf)
			if n > 0 {
				s.nc.SetWriteDeadline(time.Now().Add(c.stall))
				if err := s.c.WriteData(buf[:n]); err != nil {
					return err
				}
			}
			if rerr == io.EOF {
				defer s.nc.SetWriteDeadline(time.Time{})
				return s.c.WriteDataEnd(nil)
			}
			if rerr != nil {
				// Tell the agent to discard what it got, then fail.
				s.c.WriteDataEnd(&proto.Error{Code: proto.CodeIO, Message: "host read failed"})
				return &sourceError{rerr}
			}
		}
	}
	var srcErr *sourceError
	resp, err := c.do(ctx, proto.Request{Op: proto.OpUpload, Path: name, Mode: mode}, func(s *session) error {
		err := send(s)
		errors.As(err, &srcErr)
		if err != nil {
			// The agent may have refused and hung up: its answer says why.
			s.nc.SetReadDeadline(time.Now().Add(2 * time.Second))
		}
		return err
	}, nil)
	if srcErr != nil {
		return 0, srcErr
	}
	if err != nil {
		return 0, err
	}
	if resp.Written == nil {
		return 0, badAnswer(proto.OpUpload, "no byte count")
	}
	return *resp.Written, nil
}

// sourceError is a failure to read the caller's upload source.
type sourceError struct{ err error }

func (e *sourceError) Error() string { return "read upload source: " + e.err.Error() }
func (e *sourceError) Unwrap() error { return e.err }

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe)
}

// Download writes the guest file name to w and returns its size. A file
// announced as larger than max fails with ErrTooLarge before a byte is
// read; a stream longer than announced is a protocol violation
// (ErrProtocol), stopped at the announced size; a shorter one (the file
// shrank, or failed to read midway) is an error.
func (c *Client) Download(ctx context.Context, name string, w io.Writer, max int64) (int64, error) {
	var n int64
	_, err := c.do(ctx, proto.Request{Op: proto.OpDownload, Path: name}, nil, func(s *session) (proto.Response, error) {
		resp, err := readResponse(s)
		if err != nil || resp.Error != nil {
			return resp, err
		}
		if resp.File == nil {
			return resp, fmt.Errorf("%w: download answer without file info", ErrProtocol)
		}
		size := resp.File.Size
		if size > max {
			return resp, fmt.Errorf("%w: %s is %d bytes; downloads are limited to %d", ErrTooLarge, name, size, max)
		}
		n, err = io.CopyBuffer(w, stallReader{s.c.DataReader(size), s.nc, c.stall}, make([]byte, 256<<10))
		s.nc.SetReadDeadline(time.Time{})
		if err == nil && n != size {
			err = fmt.Errorf("%s: got %d of the %d bytes announced (did the file change while it was read?)", name, n, size)
		}
		return resp, err
	})
	return n, err
}

// Health returns the guest's uptime and memory.
func (c *Client) Health(ctx context.Context) (proto.Health, error) {
	resp, err := c.do(ctx, proto.Request{Op: proto.OpHealth}, nil, nil)
	if err != nil {
		return proto.Health{}, err
	}
	if resp.Health == nil {
		return proto.Health{}, badAnswer(proto.OpHealth, "no answer")
	}
	return *resp.Health, nil
}

// Shutdown asks the guest to shut down (sync, unmount, reboot: the VMM
// then ends). A connection that ends without an answer counts as done.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.do(ctx, proto.Request{Op: proto.OpShutdown}, nil, func(s *session) (proto.Response, error) {
		resp, err := readResponse(s)
		if errors.Is(err, io.EOF) || isNetErr(err) {
			return proto.Response{}, nil
		}
		return resp, err
	})
	c.Close()
	return err
}
