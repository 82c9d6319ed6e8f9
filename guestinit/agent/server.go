package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/proto"
)

// Interpreter is what the agent needs of the interpreter supervisor:
// Python's default session and commands (*interp.Interp implements it).
// The guest's *sessions.Registry implements it too, and SessionRunner and
// ContextKeeper besides, for the other languages and contexts
// (contexts.go).
type Interpreter interface {
	Run(ctx context.Context, code string, timeout time.Duration, onEvent func(cell.Event)) (cell.Result, error)
	Interrupt() bool
	Restart() error
	Exec(ctx context.Context, argv []string, stdin io.Reader, timeout time.Duration) (cell.ExecResult, error)
}

// Config configures a Server.
type Config struct {
	Interp Interpreter
	// Files is the path policy for uploads and downloads.
	Files FilePolicy
	// Software names the agent in the hello (e.g. "cellvm-init 1.2").
	Software string
	// OnShutdown is called, once, after a shutdown request was answered
	// and the host closed the connection (or a second passed). Nil:
	// shutdown requests fail.
	OnShutdown func()
	// NewMachine serves reseed requests (a guest restored from a
	// snapshot); nil refuses them.
	NewMachine *NewMachine
	// Procs says how background processes start (procs.go).
	Procs ProcSpec
	// MaxConns bounds concurrent connections. Default 192: room for a
	// stream of each of proto.MaxProcs processes and more besides.
	MaxConns int
	// HelloTimeout bounds the hello exchange. Default 10s.
	HelloTimeout time.Duration
	// WriteTimeout bounds each write to the host: how long the host may
	// read nothing of what the agent sends (progress.go). Default 30s.
	WriteTimeout time.Duration
	Logger       *slog.Logger
}

// Server serves the agent protocol.
type Server struct {
	cfg          Config
	log          *slog.Logger
	start        time.Time
	sem          chan struct{}
	shutdownOnce sync.Once
	procs        *procTable

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewServer returns a Server.
func NewServer(cfg Config) *Server {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 3 * proto.MaxProcs
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Software == "" {
		cfg.Software = "cellvm-init"
	}
	return &Server{cfg: cfg, log: cfg.Logger, start: time.Now(), sem: make(chan struct{}, cfg.MaxConns), conns: map[net.Conn]struct{}{},
		procs: newProcTable(cfg.Procs, cfg.Logger)}
}

// Serve accepts connections on ln until ln fails or Close is called.
func (s *Server) Serve(ln net.Listener) error {
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.log.Warn("too many connections; refusing one", "max", s.cfg.MaxConns)
			nc.Close()
			continue
		}
		go func() {
			defer func() { <-s.sem }()
			s.ServeConn(nc)
		}()
	}
}

// Close closes every open connection; Serve returns once its listener is
// closed too.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for nc := range s.conns {
		nc.Close()
	}
}

func (s *Server) track(nc net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[nc] = struct{}{}
	return true
}

func (s *Server) untrack(nc net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, nc)
}

// session is one connection.
type session struct {
	s  *Server
	nc net.Conn
	c  *proto.Conn
}

// ServeConn serves one connection until the host closes it or breaks the
// protocol. A panic in a handler closes the connection, not the agent.
func (s *Server) ServeConn(nc net.Conn) {
	defer nc.Close()
	if !s.track(nc) {
		return
	}
	defer s.untrack(nc)
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("agent: panic serving a connection", "panic", p)
		}
	}()
	ss := &session{s: s, nc: nc, c: proto.NewConn(progressConn{nc, s.cfg.WriteTimeout}, proto.MaxRequest)}
	if err := ss.hello(); err != nil {
		s.log.Warn("agent: hello failed", "err", err)
		return
	}
	for {
		var req proto.Request
		err := ss.c.ReadJSON(proto.TypeRequest, &req)
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			s.log.Warn("agent: bad request; closing the connection", "err", err)
			ss.reply(proto.Response{Error: &proto.Error{Code: proto.CodeBadRequest, Message: err.Error()}})
			return
		}
		if !ss.handle(&req) {
			return
		}
	}
}

func (ss *session) hello() error {
	ss.nc.SetDeadline(time.Now().Add(ss.s.cfg.HelloTimeout))
	defer ss.nc.SetDeadline(time.Time{})
	var h proto.Hello
	if err := ss.c.ReadJSON(proto.TypeHello, &h); err != nil {
		return fmt.Errorf("read hello: %w", err)
	}
	if h.Version != proto.Version {
		ss.c.WriteJSON(proto.TypeResponse, proto.Response{Error: &proto.Error{
			Code:    proto.CodeUnsupported,
			Message: fmt.Sprintf("agent speaks protocol version %d, not %d", proto.Version, h.Version),
		}})
		return fmt.Errorf("host speaks version %d", h.Version)
	}
	return ss.c.WriteJSON(proto.TypeHello, proto.Hello{Version: proto.Version, Software: ss.s.cfg.Software})
}

// reply writes the response; it reports whether that worked.
func (ss *session) reply(r proto.Response) bool {
	ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
	if err := ss.c.WriteJSON(proto.TypeResponse, r); err != nil {
		ss.s.log.Warn("agent: write response", "err", err)
		return false
	}
	return true
}

func errResponse(code string, err error) proto.Response {
	return proto.Response{Error: &proto.Error{Code: code, Message: err.Error()}}
}

// handle serves one request; it reports whether the connection may carry
// another.
func (ss *session) handle(req *proto.Request) bool {
	switch req.Op {
	case proto.OpRun:
		return ss.run(req)
	case proto.OpExec:
		return ss.exec(req)
	case proto.OpInterrupt:
		b := ss.s.cfg.Interp.Interrupt()
		return ss.reply(proto.Response{Interrupted: &b})
	case proto.OpRestart:
		return ss.restart(req)
	case proto.OpContext:
		return ss.contextOp(req)
	case proto.OpUpload:
		return ss.upload(req)
	case proto.OpDownload:
		return ss.download(req)
	case proto.OpHealth:
		h, err := ss.s.health()
		if err != nil {
			return ss.reply(errResponse(proto.CodeInternal, err))
		}
		return ss.reply(proto.Response{Health: h})
	case proto.OpShutdown:
		return ss.shutdown()
	case proto.OpSetEnv:
		return ss.setEnv(req)
	case proto.OpReseed:
		return ss.reseed(req)
	case proto.OpFile:
		return ss.fileOp(req)
	case proto.OpProc:
		return ss.proc(req)
	}
	return ss.reply(errResponse(proto.CodeBadRequest, fmt.Errorf("unknown op %q", req.Op)))
}

// watch cancels cancel when the host closes the connection (or, breaking
// the protocol, sends anything) while a request runs. stop ends the watch
// and reports whether the connection is still usable.
func (ss *session) watch(cancel context.CancelFunc) (stop func() bool) {
	done := make(chan bool, 1)
	go func() {
		var b [1]byte
		n, err := ss.nc.Read(b[:])
		var ne net.Error
		usable := n == 0 && errors.As(err, &ne) && ne.Timeout()
		if !usable {
			cancel()
		}
		done <- usable
	}()
	return func() bool {
		ss.nc.SetReadDeadline(time.Now())
		usable := <-done
		ss.nc.SetReadDeadline(time.Time{})
		return usable
	}
}

func (ss *session) run(req *proto.Request) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := ss.watch(cancel)
	writeFailed := false
	onEvent := func(e cell.Event) {
		if e.Type == cell.EventEnd || writeFailed || !proto.FitEvent(&e) {
			return // the result travels in the response
		}
		ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
		if err := ss.c.WriteJSON(proto.TypeEvent, proto.Event{Event: e}); err != nil {
			ss.s.log.Warn("agent: write event; interrupting the cell", "err", err)
			writeFailed = true
			cancel()
		}
	}
	res, err := ss.runCell(ctx, req, onEvent)
	usable := stop()
	if !usable || writeFailed {
		return false
	}
	if err != nil {
		return ss.reply(errResponse(sessionCode(err), err))
	}
	return ss.replyResult(&res)
}

// replyResult sends a cell's result fitted to the host's bounds. Should
// its encoding still pass the largest message (escaped text can grow), the
// rich results are dropped, with a note, rather than the host seeing a
// message it must refuse.
func (ss *session) replyResult(res *cell.Result) bool {
	proto.FitResult(res)
	ss.nc.SetWriteDeadline(time.Now().Add(ss.s.cfg.WriteTimeout))
	err := ss.c.WriteJSON(proto.TypeResponse, proto.Response{Result: res})
	if errors.Is(err, proto.ErrMessageTooLarge) && len(res.Results) > 0 {
		res.Stderr += fmt.Sprintf("\ncellvm: the %d rich results were dropped: with them the result was over %d bytes\n", len(res.Results), proto.MaxAgentMessage)
		res.Results = nil
		proto.FitResult(res)
		return ss.reply(proto.Response{Result: res})
	}
	if err != nil {
		ss.s.log.Warn("agent: write response", "err", err)
		return false
	}
	return true
}

func (ss *session) exec(req *proto.Request) bool {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := ss.watch(cancel)
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = bytesReader(req.Stdin)
	}
	res, err := ss.s.cfg.Interp.Exec(ctx, req.Argv, stdin, time.Duration(req.TimeoutMS)*time.Millisecond)
	if !stop() {
		return false
	}
	if err != nil {
		return ss.reply(errResponse(proto.CodeInterp, err))
	}
	proto.FitExec(&res)
	return ss.reply(proto.Response{Exec: &res})
}

func (ss *session) shutdown() bool {
	if ss.s.cfg.OnShutdown == nil {
		return ss.reply(errResponse(proto.CodeBadRequest, errors.New("shutdown is not enabled")))
	}
	ss.reply(proto.Response{})
	// Give the host a moment to read the response and hang up: once the
	// guest reboots, bytes still in flight on vsock are lost.
	ss.nc.SetReadDeadline(time.Now().Add(time.Second))
	var b [1]byte
	ss.nc.Read(b[:])
	ss.s.shutdownOnce.Do(ss.s.cfg.OnShutdown)
	return false
}
