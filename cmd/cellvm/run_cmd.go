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
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// cellFlags are the flags of a command that runs one cell.
type cellFlags struct {
	code     string
	timeout  time.Duration
	outDir   string
	language string
	context  string
	session  sandbox.Session // from language and context, once source has checked them
}

func addCellFlags(fs *pflag.FlagSet) *cellFlags {
	c := &cellFlags{}
	fs.StringVarP(&c.code, "code", "c", "", "code to run (or give a FILE, or - for stdin)")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "cell timeout")
	fs.StringVar(&c.outDir, "out-dir", ".", "where images from the result are saved")
	addSessionFlags(fs, &c.language, &c.context)
	return c
}

// addSessionFlags adds --language and --context, which pick a sandbox's
// session (sessionOf reads them).
func addSessionFlags(fs *pflag.FlagSet, language, context *string) {
	fs.StringVar(language, "language", "", "the cell's language: "+cell.LanguageList(cell.Languages)+" (default python); each has its own session")
	fs.StringVar(context, "context", "", "a named session (context) of the language, with its own variables (default: the language's default one)")
}

// sessionOf checks --language and --context: a bad one is a usage error,
// found before the daemon is reached.
func sessionOf(language, context string) (sandbox.Session, error) {
	l, err := cell.ParseLanguage(language)
	if err != nil {
		return sandbox.Session{}, usageError{fmt.Errorf("--language: %w", err)}
	}
	if context != "" && !cell.ValidContextName(context) {
		return sandbox.Session{}, usagef("--context %q: 1 to %d letters, digits, '.', '_' or '-', not starting with '.' or '-'", clipArg(context), cell.MaxContextNameBytes)
	}
	if language == "" {
		// Python's default session is the zero Session, as a server
		// without languages knows it.
		l = ""
	}
	return sandbox.Session{Language: l, Context: context}, nil
}

// source reads the cell's code and checks the timeout and session.
func (c *cellFlags) source(args []string, stdin io.Reader) (string, error) {
	if c.timeout <= 0 {
		return "", usagef("--timeout must be positive")
	}
	var err error
	if c.session, err = sessionOf(c.language, c.context); err != nil {
		return "", err
	}
	src, err := codeArg(c.code, args, stdin)
	if err != nil {
		return "", usageError{err}
	}
	return src, nil
}

// configFlags are the flags that shape a new sandbox.
type configFlags struct {
	memory, vcpus int
	allow         []string
	env           []string
	root          bool
}

func addConfigFlags(fs *pflag.FlagSet) *configFlags {
	c := &configFlags{}
	fs.IntVar(&c.memory, "memory", sandbox.DefaultMemoryMiB, "guest memory in MiB")
	fs.IntVar(&c.vcpus, "vcpus", sandbox.DefaultVCPUs, "vCPUs")
	fs.StringSliceVar(&c.allow, "allow", nil, "egress allowlist entry: address, CIDR, name or *.name, with an optional :port (repeatable or comma-separated; default: no network)")
	fs.StringArrayVar(&c.env, "env", nil, "environment variable KEY=VALUE for the sandbox's code (repeatable)")
	fs.BoolVar(&c.root, "root", false, "the sandbox's code runs as root in the guest (default: an unprivileged user)")
	return c
}

// config builds and validates the sandbox config.
func (c *configFlags) config() (sandbox.Config, error) {
	// The API reads 0 as "the default"; on the command line a 0 the
	// user typed is a mistake, not a request for 512 MiB.
	if c.memory < 1 {
		return sandbox.Config{}, usageError{fmt.Errorf("--memory must be at least 1 MiB, got %d", c.memory)}
	}
	if c.vcpus < 1 {
		return sandbox.Config{}, usageError{fmt.Errorf("--vcpus must be at least 1, got %d", c.vcpus)}
	}
	cfg := sandbox.Config{VCPUs: c.vcpus, MemoryMiB: c.memory, Root: c.root}
	if len(c.allow) > 0 {
		cfg.Network = &sandbox.NetworkPolicy{Allow: c.allow}
	}
	var err error
	if cfg.Env, err = parseEnv(c.env); err != nil {
		return cfg, err
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// parseEnv reads --env KEY=VALUE flags (nil for none).
func parseEnv(kvs []string) (map[string]string, error) {
	var env map[string]string
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usagef("--env %q: want KEY=VALUE", clipArg(kv))
		}
		if env == nil {
			env = map[string]string{}
		}
		env[k] = v
	}
	return env, nil
}

func clipArg(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func (a *app) runCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run [-c CODE | FILE | -]",
		Short: "create a sandbox, run a cell (Python, JavaScript, TypeScript or Bash), print the result as it comes, destroy the sandbox",
		Long: "Create a sandbox, run a cell in it (-c CODE, a FILE, or - for stdin; Python unless --language\n" +
			"says otherwise), stream its stdout and stderr as they come, print the result, and destroy the\n" +
			"sandbox. Without --socket or --url the VM\n" +
			"runs from this process; with one, in the daemon.\n\n" + exitCodesHelp,
		Args: cobra.MaximumNArgs(1),
	}
	conn := a.addConnFlags(cmd.Flags())
	guest := addGuestFlags(cmd.Flags(), "warn")
	cf := addCellFlags(cmd.Flags())
	conf := addConfigFlags(cmd.Flags())
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 1 {
			return usagef("one FILE at most, got %d arguments", len(args))
		}
		return nil
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		src, err := cf.source(args, a.stdin)
		if err != nil {
			return err
		}
		cfg, err := conf.config()
		if err != nil {
			return err
		}
		if _, err := newLogger(a.stderr, guest.logLevel); err != nil {
			return err
		}
		// A sandbox left in a daemon by a CLI that died goes by itself.
		cfg.TTL = min((cf.timeout + 10*time.Minute).Truncate(time.Second), sandbox.MaxTTL)
		m, cleanup, err := a.backend(conn, guest)
		if err != nil {
			return err
		}
		defer cleanup()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		info, err := m.Create(ctx, cfg)
		if err != nil {
			return fmt.Errorf("create sandbox: %w", err)
		}
		defer m.Delete(context.Background(), info.ID)
		return a.runCell(ctx, m, info.ID, src, cf)
	}
	return cmd
}

// runCell runs one cell, streaming its output unless --json asked for the
// result alone, and turns the result into the exit status.
func (a *app) runCell(ctx context.Context, m sandbox.Manager, id, src string, cf *cellFlags) error {
	var onEvent func(cell.Event)
	var seen streamed
	if !a.jsonOut {
		// Print the cell's output the moment it arrives.
		onEvent = func(ev cell.Event) {
			switch ev.Type {
			case cell.EventStdout:
				seen.stdout = true
				io.WriteString(a.stdout, ev.Text)
			case cell.EventStderr:
				seen.stderr = true
				io.WriteString(a.stderr, ev.Text)
			}
		}
	}
	res, err := m.RunCell(ctx, id, sandbox.Cell{Session: cf.session, Code: src, Timeout: cf.timeout}, onEvent)
	if err != nil {
		return fmt.Errorf("run cell: %w", err)
	}
	if a.jsonOut {
		printJSON(a.stdout, res)
	} else {
		printResult(res, a.stdout, a.stderr, cf.outDir, seen)
	}
	return exitStatus(cellExit(res))
}

// codeArg picks the code from -c, a file argument, or stdin ("-").
func codeArg(c string, rest []string, stdin io.Reader) (string, error) {
	switch {
	case c != "" && len(rest) > 0:
		return "", fmt.Errorf("give either -c CODE or a FILE, not both")
	case c != "":
		return c, nil
	case len(rest) == 1 && rest[0] == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, sandbox.MaxCodeBytes+1))
		if err != nil {
			return "", err
		}
		return string(b), nil
	case len(rest) == 1:
		b, err := os.ReadFile(rest[0])
		if err != nil {
			return "", err
		}
		return string(b), nil
	case len(rest) > 1:
		return "", fmt.Errorf("one FILE at most, got %d arguments", len(rest))
	}
	return "", fmt.Errorf("no code: give -c CODE, a FILE, or - for stdin")
}
