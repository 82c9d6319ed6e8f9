package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/mcpserver"
	"github.com/cellvm/cellvm/sandbox"
)

// mcpFlags are the tool settings of an MCP server, on stdio (`cellvm mcp`)
// or over HTTP (`cellvm serve --mcp`).
type mcpFlags struct {
	timeout    time.Duration
	maxChars   int
	companions bool
	conf       *configFlags
	// cp are `cellvm mcp`'s --checkpoints and --keep; checkpoints is
	// serve's --mcp-checkpoints (every cell, the default keep).
	cp          *checkpointFlags
	checkpoints bool
}

func addMCPFlags(fs *pflag.FlagSet, withConfig bool) *mcpFlags {
	f := &mcpFlags{}
	fs.DurationVar(&f.timeout, "timeout", 60*time.Second, "default time limit of one tool call")
	fs.IntVar(&f.maxChars, "max-chars", 8000, "characters of each output section returned (cut from the middle)")
	fs.BoolVar(&f.companions, "tools", true, "offer run_code (the image's other languages: JavaScript, TypeScript, Bash), exec, read_file, write_file, list_files, upload_file and restart_python beside run_python")
	if withConfig {
		f.conf = addConfigFlags(fs)
		f.cp = addCheckpointFlags(fs)
	}
	return f
}

// checkpointConfig is the Config.Checkpoints of the sessions' sandboxes:
// with every-cell checkpoints the tools include undo_last_cell.
func (f *mcpFlags) checkpointConfig() (*sandbox.CheckpointConfig, error) {
	if f.cp != nil {
		return f.cp.config()
	}
	if f.checkpoints {
		return &sandbox.CheckpointConfig{EveryCell: true}, nil
	}
	return nil, nil
}

func (f *mcpFlags) toolbox() agent.Toolbox {
	return agent.Toolbox{Timeout: f.timeout, Companions: f.companions, Format: agent.FormatOptions{MaxChars: f.maxChars}}
}

// mcpCommand serves cellvm's tools to an MCP client over stdin/stdout. The
// session's sandbox is created on the first tool call and deleted when the
// client disconnects. Logs go to stderr: stdout carries the protocol.
func (a *app) mcpCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "serve the sandbox tools to an MCP client over stdio (serve --mcp offers them over HTTP)",
		Args:  noArgs,
	}
	conn := a.addConnFlags(cmd.Flags())
	guest := addGuestFlags(cmd.Flags(), "warn")
	mf := addMCPFlags(cmd.Flags(), true)
	cmd.RunE = func(*cobra.Command, []string) error {
		cfg, err := mf.conf.config()
		if err != nil {
			return err
		}
		if cfg.Checkpoints, err = mf.checkpointConfig(); err != nil {
			return err
		}
		log, err := newLogger(a.stderr, guest.logLevel)
		if err != nil {
			return err
		}
		m, cleanup, err := a.backend(conn, guest)
		if err != nil {
			return err
		}
		defer cleanup()
		srv := mcpserver.New(m, mcpserver.Options{Config: cfg, Toolbox: mf.toolbox(), Log: log, Version: moduleVersion()})
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		t := &mcp.IOTransport{Reader: io.NopCloser(a.stdin), Writer: nopWriteCloser{a.stdout}}
		if err := srv.Serve(ctx, t); err != nil && ctx.Err() == nil {
			return err
		}
		return nil
	}
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
