package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/chat"
	"github.com/cellvm/cellvm/agent/convstore"
	"github.com/cellvm/cellvm/sandbox"
)

// chatCommand asks a model a question and lets it answer by running code
// in a sandbox: cellvm chat [flags] "question" (or - to read it from stdin).
func (a *app) chatCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chat QUESTION... | chat -",
		Short: "ask a model a question; it answers by running Python in a sandbox",
		Long: "Ask a model a question; it answers by running Python in a sandbox (and, with --tools, JavaScript,\n" +
			"TypeScript and Bash where the image has them: the run_code tool). The model API is picked by\n" +
			"ANTHROPIC_API_KEY, OPENAI_API_KEY (with OPENAI_BASE_URL) or GEMINI_API_KEY.",
	}
	fs := cmd.Flags()
	conn := a.addConnFlags(fs)
	guest := addGuestFlags(fs, "warn")
	provider := fs.String("provider", "auto", "model API: auto, anthropic, openai, responses or gemini (auto picks by ANTHROPIC_API_KEY, OPENAI_API_KEY/OPENAI_BASE_URL, GEMINI_API_KEY)")
	model := fs.String("model", os.Getenv("CELLVM_MODEL"), "model name (default: the provider's default, or $CELLVM_MODEL)")
	conversation := fs.String("conversation", "", "conversation id: keep the sandbox and history between invocations (needs the daemon)")
	maxTurns := fs.Int("max-turns", agent.DefaultMaxTurns, "most model turns for this question")
	maxTokens := fs.Int("max-tokens", 0, "most output tokens per model turn (0: the adapter's default)")
	timeout := fs.Duration("timeout", 60*time.Second, "default time limit of one tool call")
	maxChars := fs.Int("max-chars", 8000, "characters of each output section shown to the model (cut from the middle)")
	companions := fs.Bool("tools", true, "offer run_code (the image's other languages), exec, read_file and write_file beside run_python")
	conf := addConfigFlags(fs)
	cp := addCheckpointFlags(fs)
	system := fs.String("system", "", "system prompt (default: cellvm's)")
	outDir := fs.String("out-dir", ".", "where images from tool results are saved")
	confirm := fs.Bool("confirm", false, "ask before each cell or command runs: y runs it, n refuses (the model is told), e edits it ($VISUAL/$EDITOR on a terminal, else lines read from stdin up to a single \".\")")
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		return a.chat(chatArgs{conn: conn, guest: guest, provider: *provider, model: *model, conversation: *conversation,
			maxTurns: *maxTurns, maxTokens: *maxTokens, timeout: *timeout, maxChars: *maxChars, companions: *companions,
			conf: conf, cp: cp, system: *system, outDir: *outDir, confirm: *confirm}, args)
	}
	return cmd
}

type chatArgs struct {
	conn                          *connFlags
	guest                         *guestFlags
	provider, model, conversation string
	maxTurns, maxTokens, maxChars int
	timeout                       time.Duration
	companions, confirm           bool
	conf                          *configFlags
	cp                            *checkpointFlags
	system, outDir                string
}

func (a *app) chat(o chatArgs, args []string) error {
	question := strings.Join(args, " ")
	if question == "-" && o.confirm {
		return usagef("--confirm reads its answers from stdin: give the question as arguments, not -")
	}
	if question == "-" {
		data, err := io.ReadAll(io.LimitReader(a.stdin, sandbox.MaxCodeBytes+1))
		if err != nil {
			return fmt.Errorf("read the question: %w", err)
		}
		question = string(data)
	}
	if strings.TrimSpace(question) == "" {
		return usagef("give a question: cellvm chat \"what is ...?\"")
	}
	if o.conversation != "" {
		if err := convstore.ValidID(o.conversation); err != nil {
			return usageError{err}
		}
	}
	m, modelProvider, err := chat.ModelFromEnv(o.provider, o.model, o.maxTokens, os.Getenv)
	if err != nil {
		return usageError{err}
	}
	cfg, err := o.conf.config()
	if err != nil {
		return err
	}
	if cfg.Checkpoints, err = o.cp.config(); err != nil {
		return err
	}

	var mgr sandbox.Manager
	var cleanup func()
	if o.conversation != "" {
		// A sandbox outlives this process only in a daemon.
		c, err := o.conn.client()
		if err != nil {
			return fmt.Errorf("--conversation keeps the sandbox in the daemon: %w", err)
		}
		mgr, cleanup = c, c.Close
	} else {
		mgr, cleanup, err = a.backend(o.conn, o.guest)
		if err != nil {
			return err
		}
	}
	defer cleanup()
	var store convstore.Store
	if o.conversation != "" {
		dir, err := convstore.DefaultDir()
		if err != nil {
			return err
		}
		store = convstore.Store{Dir: dir}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tb := agent.Toolbox{Timeout: o.timeout, Companions: o.companions, Format: agent.FormatOptions{MaxChars: o.maxChars}}
	if o.confirm {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		tb.Approve = newConfirmer(a.stdin, a.stderr, os.Getenv, cancel).approve
	}
	res, err := chat.Run(ctx, chat.Options{
		Manager: mgr, Model: m, Provider: modelProvider, ModelName: o.model,
		Question: question, Conversation: o.conversation, Store: store, Config: cfg,
		Toolbox:  tb,
		MaxTurns: o.maxTurns, System: o.system, OutDir: o.outDir,
		Stdout: stdoutUnlessJSON(a.stdout, a.jsonOut), Stderr: a.stderr,
	})
	if a.jsonOut {
		printJSON(a.stdout, map[string]any{
			"answer": res.Outcome.Answer, "turns": res.Outcome.Turns, "tool_calls": res.Outcome.Calls,
			"sandbox_id": res.SandboxID, "conversation": o.conversation, "images": res.Images,
			"error": errString(err),
		})
		if err != nil {
			return exitStatus(exitError)
		}
	}
	return err
}

func stdoutUnlessJSON(w io.Writer, jsonOut bool) io.Writer {
	if jsonOut {
		return io.Discard
	}
	return w
}

func errString(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}
