package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// groupCommand is a command that only holds subcommands: with none, or an
// unknown one, it is a usage error (exit 2), never a call to the daemon.
func groupCommand(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Args: noArgs}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		return usagef("give a subcommand: %s", strings.Join(names, ", "))
	}
	cmd.AddCommand(subs...)
	return cmd
}

// daemonCommand runs f with a client for the daemon, once the arguments
// have been checked (cobra checks Args before RunE).
func (a *app) daemonCommand(cmd *cobra.Command, f func(ctx context.Context, c *api.Client, args []string) error) *cobra.Command {
	conn := a.addConnFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := conn.client()
		if err != nil {
			return err
		}
		defer c.Close()
		return f(cmd.Context(), c, args)
	}
	return cmd
}

func (a *app) sandboxCommand() *cobra.Command {
	return groupCommand("sandbox", "create, list, inspect, remove, pause, resume, snapshot, fork, restart or interrupt sandboxes in the daemon",
		a.sandboxCreateCommand(),
		a.sandboxSnapshotCommand(),
		a.sandboxForkCommand(),
		a.sandboxLsCommand(),
		a.sandboxTTLCommand(),
		a.daemonCommand(&cobra.Command{Use: "inspect SANDBOX", Short: "print a sandbox's state, config and usage as JSON (and why it was lost)", Args: exactArgs(1, "one SANDBOX")},
			func(ctx context.Context, c *api.Client, args []string) error {
				info, err := c.Get(ctx, args[0])
				if err != nil {
					return err
				}
				printJSON(a.stdout, info)
				if info.Lost != nil && !a.jsonOut {
					fmt.Fprintf(a.stderr, "cellvm: sandbox %s was lost: %s (%s)\n", info.ID, info.Lost.Reason, info.Lost.Exit)
				}
				return nil
			}),
		a.daemonCommand(&cobra.Command{Use: "rm SANDBOX...", Aliases: []string{"remove"}, Short: "destroy sandboxes (VM, network, files: nothing is left)", Args: minArgs(1, "at least one SANDBOX")},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.removeEach(ctx, "cellvm sandbox rm", "id", args, c.Delete)
			}),
		a.lifecycleCommand("pause", "pause a sandbox to disk: its VM ends and its memory goes back to the host (a cell must not be running; the next cell, exec or cp resumes it)", (*api.Client).Pause),
		a.lifecycleCommand("resume", "resume a paused sandbox from disk, with its variables", (*api.Client).Resume),
		a.sandboxRestartCommand(),
		a.lifecycleCommand("interrupt", "interrupt the cell running in a sandbox", (*api.Client).Interrupt),
	)
}

// removeEach removes every item with del, saying on stderr which failed
// (then exit 1): one that fails does not stop the others. With --json it
// prints a line per item on stdout instead, {KEY: item, "removed": true}
// or {KEY: item, "removed": false, "error": {"code", "message"}}, KEY
// being "id" (sandboxes, snapshots) or "name" (workspaces, images).
func (a *app) removeEach(ctx context.Context, cmd, key string, items []string, del func(context.Context, string) error) error {
	failed := false
	for _, item := range items {
		err := del(ctx, item)
		if err != nil {
			failed = true
		}
		switch {
		case a.jsonOut && err == nil:
			printJSONLine(a.stdout, map[string]any{key: item, "removed": true})
		case a.jsonOut:
			_, code := classify(err)
			printJSONLine(a.stdout, map[string]any{key: item, "removed": false, "error": map[string]string{"code": code, "message": err.Error()}})
		case err != nil:
			fmt.Fprintf(a.stderr, "%s %s: %v\n", cmd, item, err)
		}
	}
	if failed {
		return exitStatus(exitError)
	}
	return nil
}

func (a *app) lifecycleCommand(name, short string, op func(*api.Client, context.Context, string) error) *cobra.Command {
	return a.daemonCommand(&cobra.Command{Use: name + " SANDBOX", Short: short, Args: exactArgs(1, "one SANDBOX")},
		func(ctx context.Context, c *api.Client, args []string) error {
			if err := op(c, ctx, args[0]); err != nil {
				return err
			}
			if a.jsonOut {
				return printJSON(a.stdout, map[string]string{"id": args[0], "done": name})
			}
			return nil
		})
}

func (a *app) sandboxCreateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "create",
		Short: "create a sandbox in the daemon and print its id",
		Args:  noArgs,
	}
	conf := addConfigFlags(cmd.Flags())
	life := addLifetimeFlags(cmd.Flags())
	var cold bool
	var workspace, image string
	cmd.Flags().BoolVar(&cold, "cold", false, "boot the sandbox's VM even when the daemon has a template ready for its shape")
	cmd.Flags().StringVar(&image, "image", "", "the root image to boot (cellvm image ls lists them; default: the daemon's own)")
	cmd.Flags().StringVar(&workspace, "workspace", "", "mount this persistent volume at /workspace (made on first use, kept after the sandbox; cellvm workspace ls lists them)")
	lf := addLabelFlags(cmd.Flags(), "label the sandbox KEY=VALUE (repeatable; sandbox ls -l KEY=VALUE finds it)")
	cpf := addCheckpointFlags(cmd.Flags())
	return a.daemonCommandChecked(cmd, func([]string) error {
		if err := life.check(); err != nil {
			return err
		}
		if cc, err := cpf.config(); err != nil {
			return err
		} else if cc != nil && workspace != "" {
			return usagef("--checkpoints with --workspace: a workspace is a disk that outlives the sandbox and would not roll back")
		}
		if _, err := lf.labels(); err != nil {
			return err
		}
		if workspace != "" && !sandbox.ValidWorkspaceName(workspace) {
			return workspaceArg(workspace)
		}
		if image != "" && !sandbox.ValidImageName(image) {
			return usagef("%q is not an image name (cellvm image ls lists them)", clipArg(image))
		}
		_, err := conf.config()
		return err
	}, func(ctx context.Context, c *api.Client, _ []string) error {
		cfg, _ := conf.config()
		life.apply(&cfg)
		if cold {
			cfg.Start = sandbox.StartCold
		}
		cfg.Workspace, cfg.Image = workspace, image
		cfg.Labels, _ = lf.labels()
		cfg.Checkpoints, _ = cpf.config()
		return a.printCreated(c.Create(ctx, cfg))
	})
}

// printCreated prints a sandbox a command created: its id, or with
// --json its Info.
func (a *app) printCreated(info sandbox.Info, err error) error {
	if err != nil {
		return err
	}
	if a.jsonOut {
		return printJSON(a.stdout, info)
	}
	fmt.Fprintln(a.stdout, info.ID)
	return nil
}

// daemonCommandChecked is daemonCommand with a check of the flags and
// arguments that runs before the daemon is reached.
func (a *app) daemonCommandChecked(cmd *cobra.Command, check func(args []string) error, f func(ctx context.Context, c *api.Client, args []string) error) *cobra.Command {
	a.daemonCommand(cmd, f)
	cmd.PreRunE = func(_ *cobra.Command, args []string) error { return check(args) }
	return cmd
}

// cellCommand is `cellvm cell SANDBOX -c CODE`.
func (a *app) cellCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cell SANDBOX [-c CODE | FILE | -]",
		Short: "run a cell (Python, JavaScript, TypeScript or Bash) in a daemon's sandbox, streaming its output",
		Long: "Run a cell in a daemon's sandbox (-c CODE, a FILE, or - for stdin); stdout and stderr are printed as they come, then the result.\n" +
			"--language picks the language (Python by default); each language, and each --context of it, is a session of its own\n" +
			"whose variables persist from cell to cell.\n\n" + exitCodesHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usagef("usage: cellvm cell SANDBOX -c CODE | cellvm cell SANDBOX FILE")
			}
			return nil
		},
	}
	cf := addCellFlags(cmd.Flags())
	var src string
	return a.daemonCommandChecked(cmd, func(args []string) error {
		var err error
		src, err = cf.source(args[1:], a.stdin)
		return err
	}, func(ctx context.Context, c *api.Client, args []string) error {
		return a.runCell(ctx, c, args[0], src, cf)
	})
}

// execCommand is `cellvm exec [flags] SANDBOX [flags] [--] ARGV...`: the
// command's own flags are not cellvm's, so cellvm's flags end at ARGV's
// first word (or at "--").
func (a *app) execCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "exec SANDBOX [--] ARGV...",
		Short: "run a command in a daemon's sandbox (outside the interpreter)",
		Long: "Run a command in a daemon's sandbox. cellvm's flags go before ARGV; everything from ARGV's first\n" +
			"word on (or after --) is the command's. The exit status is the command's, or 124 if it timed out.\n" +
			"With -i, -t or -d it runs as a process that streams its output: -i passes stdin on, -t gives it a\n" +
			"terminal (exec -it SANDBOX -- bash), -d starts it in the background and prints its pid (cellvm ps,\n" +
			"cellvm kill).",
		DisableFlagParsing: true,
	}
	var timeout time.Duration
	cmd.Flags().DurationVar(&timeout, "timeout", 60*time.Second, "command timeout")
	pf := addProcFlags(cmd)
	var id string
	var argv []string
	return a.daemonCommandChecked(cmd, func(args []string) error {
		var err error
		if id, argv, err = parseExecArgs(cmd, args); err != nil {
			return err
		}
		if timeout <= 0 {
			return usagef("--timeout must be positive")
		}
		return nil
	}, func(ctx context.Context, c *api.Client, _ []string) error {
		if pf.any() {
			// A process: no timeout unless one was asked for.
			var limit time.Duration
			if cmd.Flags().Changed("timeout") {
				limit = timeout
			}
			return a.runProcess(ctx, c, id, argv, *pf, limit)
		}
		r, err := c.Exec(ctx, id, sandbox.ExecRequest{Argv: argv, Timeout: timeout})
		if err != nil {
			return err
		}
		if a.jsonOut {
			printJSON(a.stdout, r)
		} else {
			fmt.Fprint(a.stdout, r.Stdout)
			fmt.Fprint(a.stderr, r.Stderr)
			if note := checkpointNote(r.Checkpoint, r.CheckpointError); note != "" {
				fmt.Fprintln(a.stderr, note)
			}
		}
		if r.TimedOut {
			if !a.jsonOut {
				fmt.Fprintln(a.stderr, "cellvm: the command timed out and was killed")
			}
			return exitStatus(exitTimeout)
		}
		return exitStatus(r.ExitCode)
	})
}

// errHelpShown ends a command whose help was asked for and printed.
var errHelpShown = exitStatus(exitOK)

// parseExecArgs parses cellvm's flags before and after SANDBOX and returns
// the sandbox and the command's argv.
func parseExecArgs(cmd *cobra.Command, args []string) (string, []string, error) {
	fs := cmd.Flags()
	fs.SetInterspersed(false)
	parse := func(args []string) ([]string, error) {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{err}
		}
		if h, _ := fs.GetBool("help"); h {
			cmd.Help()
			return nil, errHelpShown
		}
		return fs.Args(), nil
	}
	rest, err := parse(args)
	if err != nil {
		return "", nil, err
	}
	if len(rest) == 0 {
		return "", nil, usagef("usage: cellvm exec SANDBOX [flags] [--] ARGV...")
	}
	id := rest[0]
	if rest, err = parse(rest[1:]); err != nil {
		return "", nil, err
	}
	if len(rest) == 0 {
		return "", nil, usagef("no command: cellvm exec SANDBOX [flags] [--] ARGV...")
	}
	return id, rest, nil
}

// cpCommand is `cellvm cp SRC DST` where one side is SANDBOX:/path.
func (a *app) cpCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cp [-r] LOCAL SANDBOX:/path | SANDBOX:/path LOCAL",
		Short: "copy a file (-r: a directory) into or out of a daemon's sandbox",
		Args:  exactArgs(2, "SRC and DST"),
	}
	recursive := cmd.Flags().BoolP("recursive", "r", false, "copy directories and what they hold (files_cmds.go)")
	return a.daemonCommandChecked(cmd, func(args []string) error {
		_, _, srcRemote := splitRemote(args[0])
		_, _, dstRemote := splitRemote(args[1])
		if srcRemote == dstRemote {
			return usagef("exactly one of SRC and DST must be SANDBOX:/path")
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		src, dst := args[0], args[1]
		sbSrc, pSrc, _ := splitRemote(src)
		sbDst, pDst, dstRemote := splitRemote(dst)
		if *recursive {
			if done, err := a.copyTree(ctx, c, src, dst); done {
				return err
			}
		}
		if dstRemote {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := c.Upload(ctx, sbDst, pDst, f)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "copied %d bytes to %s:%s\n", n, sbDst, pDst)
			return nil
		}
		tmp := dst + ".cellvm-partial"
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		n, err := c.Download(ctx, sbSrc, pSrc, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp, dst)
		}
		if err != nil {
			os.Remove(tmp)
			return err
		}
		fmt.Fprintf(a.stderr, "copied %d bytes from %s:%s\n", n, sbSrc, pSrc)
		return nil
	})
}

// splitRemote splits "sb-123:/path" into its parts.
func splitRemote(s string) (id, path string, ok bool) {
	id, path, found := strings.Cut(s, ":")
	if !found || !strings.HasPrefix(id, "sb-") || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, path, true
}
