// Package mcpserver offers cellvm's tools (run_python, exec, read_file,
// write_file, list_files, upload_file, restart_python, and undo_last_cell
// and list_checkpoints when Options.Config has every-cell checkpoints) to
// any MCP client,
// over stdio or Streamable HTTP, using the official Go SDK. Each MCP
// session gets its own sandbox, created on its first tool call (listing
// tools costs no VM) and deleted when the session ends, so one client's
// variables are never another's and nothing outlives the connection.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/sandbox"
)

// Options configure the server.
type Options struct {
	// Config is what each session's sandbox is created with.
	Config sandbox.Config
	// Toolbox holds the tool settings (timeouts, format, companions); its
	// Manager and SandboxID are filled in per session.
	Toolbox agent.Toolbox
	Log     *slog.Logger
	// Version is reported to clients.
	Version string
}

// Server is an MCP server whose tools run in per-session sandboxes.
type Server struct {
	m    sandbox.Manager
	opts Options
	mcp  *mcp.Server
	log  *slog.Logger

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
}

type session struct {
	mu     sync.Mutex // serialises sandbox creation for the session
	id     string
	closed bool
	// end runs the session's end once; a second EndSession (Serve's and
	// the SDK's, racing) waits in it until the sandbox is deleted.
	end sync.Once
	// caller is who created the sandbox (its first tool call's caller,
	// if the front end said), so the delete at the session's end, which
	// no request carries, acts as the same caller.
	caller    sandbox.Caller
	hasCaller bool
}

// New returns a server that creates sandboxes with m.
func New(m sandbox.Manager, opts Options) *Server {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	s := &Server{m: m, opts: opts, log: log, sessions: map[*mcp.ServerSession]*session{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "cellvm", Version: version}, &mcp.ServerOptions{
		Instructions: "Tools run in an isolated microVM sandbox that belongs to this session; " +
			"run_python keeps its interpreter state between calls. The sandbox is deleted when the session ends.",
		Logger: log,
	})
	tb := opts.Toolbox
	tb.Network = networkOf(opts.Config)
	tb.Checkpoints = agent.EveryCell(opts.Config)
	for _, spec := range tb.Specs() {
		var schema map[string]any
		if err := json.Unmarshal(spec.Schema, &schema); err != nil {
			panic(fmt.Sprintf("mcpserver: tool %s has a bad schema: %v", spec.Name, err)) // a programming error in tools.go
		}
		name := spec.Name
		s.mcp.AddTool(&mcp.Tool{Name: name, Description: spec.Description, InputSchema: schema}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return s.call(ctx, req.Session, name, req.Params.Arguments), nil
		})
	}
	return s
}

func networkOf(c sandbox.Config) []string {
	if c.Network == nil {
		return nil
	}
	return c.Network.Allow
}

// MCP returns the SDK server, for transports that connect on their own.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Serve runs one session over t until the client goes away or ctx ends,
// then deletes the session's sandbox.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error {
	ss, err := s.mcp.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("mcp connect: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ss.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		ss.Close()
		<-done
		err = ctx.Err()
	}
	s.EndSession(ss)
	return err
}

// EndSession deletes the session's sandbox, if it has one. Serve calls it;
// servers that connect sessions themselves call it when one ends.
//
// Both may call it for one session at once: the second returns only once
// the first has deleted the sandbox, so Serve's return still means the
// sandbox is gone.
func (s *Server) EndSession(ss *mcp.ServerSession) {
	s.mu.Lock()
	sess := s.sessions[ss]
	s.mu.Unlock()
	if sess == nil {
		return
	}
	sess.end.Do(func() {
		defer func() {
			s.mu.Lock()
			delete(s.sessions, ss)
			s.mu.Unlock()
		}()
		sess.mu.Lock()
		defer sess.mu.Unlock()
		sess.closed = true
		if sess.id == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if sess.hasCaller {
			ctx = sandbox.WithCaller(ctx, sess.caller)
		}
		if err := s.m.Delete(ctx, sess.id); err != nil {
			s.log.Warn("delete session sandbox", "sandbox", sess.id, "err", err)
			return
		}
		s.log.Info("session ended; sandbox deleted", "sandbox", sess.id)
	})
}

// Close ends every session, which deletes their sandboxes.
func (s *Server) Close() {
	s.mu.Lock()
	var all []*mcp.ServerSession
	for ss := range s.sessions {
		all = append(all, ss)
	}
	s.mu.Unlock()
	for _, ss := range all {
		ss.Close()
		s.EndSession(ss)
	}
}

// sandboxFor returns the session's sandbox, creating it on first use.
func (s *Server) sandboxFor(ctx context.Context, ss *mcp.ServerSession) (string, error) {
	s.mu.Lock()
	sess := s.sessions[ss]
	if sess == nil {
		sess = &session{}
		s.sessions[ss] = sess
		// A session served by a transport the SDK drives itself (the
		// Streamable HTTP handler) ends without a Serve to see it: the
		// client's DELETE, its idle timeout, or Close.
		go func() { ss.Wait(); s.EndSession(ss) }()
	}
	s.mu.Unlock()
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.closed {
		return "", fmt.Errorf("the session has ended")
	}
	if sess.id != "" {
		return sess.id, nil
	}
	info, err := s.m.Create(ctx, s.opts.Config)
	if err != nil {
		return "", fmt.Errorf("create the session's sandbox: %w", err)
	}
	sess.id = info.ID
	sess.caller, sess.hasCaller = sandbox.CallerFrom(ctx)
	s.log.Info("session sandbox created", "sandbox", info.ID)
	if err := agent.StartCheckpoint(ctx, s.m, info.ID, s.opts.Config); err != nil {
		// undo_last_cell then cannot take back the first cell; nothing else is lost.
		s.log.Warn("session sandbox's first checkpoint", "sandbox", info.ID, "err", err)
	}
	return info.ID, nil
}

// SandboxOf returns the sandbox id of a session ("" when none yet).
func (s *Server) SandboxOf(ss *mcp.ServerSession) string {
	s.mu.Lock()
	sess := s.sessions[ss]
	s.mu.Unlock()
	if sess == nil {
		return ""
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.id
}

func (s *Server) call(ctx context.Context, ss *mcp.ServerSession, name string, args json.RawMessage) *mcp.CallToolResult {
	id, err := s.sandboxFor(ctx, ss)
	var res agent.ToolResult
	if err != nil {
		res = agent.ToolError("%v", err)
	} else {
		tb := s.opts.Toolbox
		tb.Manager, tb.SandboxID, tb.Network = s.m, id, networkOf(s.opts.Config)
		tb.Checkpoints = agent.EveryCell(s.opts.Config)
		res = tb.Call(ctx, name, args)
	}
	out := &mcp.CallToolResult{IsError: res.IsError}
	out.Content = append(out.Content, &mcp.TextContent{Text: res.Text})
	for _, img := range res.Images {
		out.Content = append(out.Content, &mcp.ImageContent{MIMEType: img.MIME, Data: img.Data})
	}
	return out
}
