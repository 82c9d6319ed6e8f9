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

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/chat"
	"github.com/cellvm/cellvm/agent/convstore"
	"github.com/cellvm/cellvm/sandbox"
)

// cmdChat asks a model a question and lets it answer by running code in a
// sandbox: cellvm chat [flags] "question" (or - to read it from stdin).
func cmdChat(args []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("chat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	b := addBackendFlags(fs)
	provider := fs.String("provider", "auto", "model API: auto, anthropic, openai, responses or gemini (auto picks by ANTHROPIC_API_KEY, OPENAI_API_KEY/OPENAI_BASE_URL, GEMINI_API_KEY)")
	model := fs.String("model", os.Getenv("CELLVM_MODEL"), "model name (default: the provider's default, or $CELLVM_MODEL)")
	conversation := fs.String("conversation", "", "conversation id: keep the sandbox and history between invocations (needs the daemon)")
	maxTurns := fs.Int("max-turns", agent.DefaultMaxTurns, "most model turns for this question")
	maxTokens := fs.Int("max-tokens", 0, "most output tokens per model turn (0: the adapter's default)")
	timeout := fs.Duration("timeout", 60*time.Second, "default time limit of one tool call")
	maxChars := fs.Int("max-chars", 8000, "characters of each output section shown to the model (cut from the middle)")
	companions := fs.Bool("tools", true, "offer exec, read_file and write_file beside run_python")
	memory := fs.Int("memory", sandbox.DefaultMemoryMiB, "guest memory in MiB")
	vcpus := fs.Int("vcpus", sandbox.DefaultVCPUs, "vCPUs")
	allow := fs.String("allow", "", "comma-separated egress allowlist for a new sandbox (default: no network)")
	system := fs.String("system", "", "system prompt (default: cellvm's)")
	outDir := fs.String("out-dir", ".", "where images from tool results are saved")
	if err := fs.Parse(args); err != nil {
		return 2, usageError{err}
	}
	question := strings.Join(fs.Args(), " ")
	if question == "-" {
		data, err := io.ReadAll(io.LimitReader(stdin, sandbox.MaxCodeBytes+1))
		if err != nil {
			return 1, fmt.Errorf("read the question: %w", err)
		}
		question = string(data)
	}
	if strings.TrimSpace(question) == "" {
		return 2, usageError{fmt.Errorf("give a question: cellvm chat \"what is ...?\"")}
	}
	if *conversation != "" {
		if err := convstore.ValidID(*conversation); err != nil {
			return 2, usageError{err}
		}
	}
	m, modelProvider, err := chat.ModelFromEnv(*provider, *model, *maxTokens, os.Getenv)
	if err != nil {
		return 2, usageError{err}
	}
	cfg := sandbox.Config{VCPUs: *vcpus, MemoryMiB: *memory}
	if *allow != "" {
		cfg.Network = &sandbox.NetworkPolicy{Allow: strings.Split(*allow, ",")}
	}

	var mgr sandbox.Manager
	var cleanup func()
	if *conversation != "" {
		// A sandbox outlives this process only in a daemon.
		c, err := b.remoteOnly()
		if err != nil {
			return 1, fmt.Errorf("--conversation keeps the sandbox in the daemon: %w", err)
		}
		mgr, cleanup = c, c.Close
	} else {
		mgr, cleanup, err = b.backend(stderr)
		if err != nil {
			return 1, err
		}
	}
	defer cleanup()
	var store convstore.Store
	if *conversation != "" {
		dir, err := convstore.DefaultDir()
		if err != nil {
			return 1, err
		}
		store = convstore.Store{Dir: dir}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := chat.Run(ctx, chat.Options{
		Manager: mgr, Model: m, Provider: modelProvider, ModelName: *model,
		Question: question, Conversation: *conversation, Store: store, Config: cfg,
		Toolbox:  agent.Toolbox{Timeout: *timeout, Companions: *companions, Format: agent.FormatOptions{MaxChars: *maxChars}},
		MaxTurns: *maxTurns, System: *system, OutDir: *outDir,
		Stdout: stdoutUnlessJSON(stdout, *b.jsonOut), Stderr: stderr,
	})
	if *b.jsonOut {
		printJSON(stdout, map[string]any{
			"answer": res.Outcome.Answer, "turns": res.Outcome.Turns, "tool_calls": res.Outcome.Calls,
			"sandbox_id": res.SandboxID, "conversation": *conversation, "images": res.Images,
			"error": errString(err),
		})
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
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
