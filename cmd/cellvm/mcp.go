package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/mcpserver"
	"github.com/cellvm/cellvm/sandbox"
)

// cmdMCP serves cellvm's tools to an MCP client over stdin/stdout. The
// session's sandbox is created on the first tool call and deleted when the
// client disconnects. Logs go to stderr: stdout carries the protocol.
func cmdMCP(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	timeout := fs.Duration("timeout", 60*time.Second, "default time limit of one tool call")
	maxChars := fs.Int("max-chars", 8000, "characters of each output section returned (cut from the middle)")
	companions := fs.Bool("tools", true, "offer exec, read_file and write_file beside run_python")
	memory := fs.Int("memory", sandbox.DefaultMemoryMiB, "guest memory in MiB")
	vcpus := fs.Int("vcpus", sandbox.DefaultVCPUs, "vCPUs")
	allow := fs.String("allow", "", "comma-separated egress allowlist for the session's sandbox (default: no network)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("mcp takes no arguments")}
	}
	cfg := sandbox.Config{VCPUs: *vcpus, MemoryMiB: *memory}
	if *allow != "" {
		cfg.Network = &sandbox.NetworkPolicy{Allow: strings.Split(*allow, ",")}
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usageError{err}
	}
	log, err := newLogger(stderr, *b.logLevel)
	if err != nil {
		return err
	}
	m, cleanup, err := b.backend(stderr)
	if err != nil {
		return err
	}
	defer cleanup()
	srv := mcpserver.New(m, mcpserver.Options{
		Config:  cfg,
		Toolbox: agent.Toolbox{Timeout: *timeout, Companions: *companions, Format: agent.FormatOptions{MaxChars: *maxChars}},
		Log:     log,
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
	if err := srv.Serve(ctx, t); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
