package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// Checkpoints (time travel, sandbox/checkpoints.go) on the command line:
// `sandbox create --checkpoints` turns them on, `cellvm checkpoint`
// lists, records, restores, undoes and branches. Plain output is what a
// script reads (a number, an id, a table); --json gives the API's objects.

// Values of --checkpoints.
const (
	checkpointsEveryCell = "every-cell"
	checkpointsManual    = "manual"
)

// checkpointFlags are a new sandbox's --checkpoints[=every-cell|manual]
// and --keep.
type checkpointFlags struct {
	fs   *pflag.FlagSet
	mode string
	keep int
}

func addCheckpointFlags(fs *pflag.FlagSet) *checkpointFlags {
	c := &checkpointFlags{fs: fs}
	fs.StringVar(&c.mode, "checkpoints", "", "keep checkpoints of the whole machine, to undo cells, restore or branch (cellvm checkpoint): "+
		"every-cell (what --checkpoints alone means) records one after each cell and exec, manual only on cellvm checkpoint create")
	fs.Lookup("checkpoints").NoOptDefVal = checkpointsEveryCell
	fs.IntVar(&c.keep, "keep", 0, fmt.Sprintf("with --checkpoints: the most checkpoints kept, the oldest dropped first (1 to %d; default %d)",
		sandbox.MaxCheckpointKeep, sandbox.DefaultCheckpointKeep))
	return c
}

// config is the Config.Checkpoints the flags ask for: nil without
// --checkpoints.
func (c *checkpointFlags) config() (*sandbox.CheckpointConfig, error) {
	if !c.fs.Changed("checkpoints") {
		if c.fs.Changed("keep") {
			return nil, usagef("--keep is for --checkpoints; give both")
		}
		return nil, nil
	}
	cc := &sandbox.CheckpointConfig{Keep: c.keep}
	switch c.mode {
	case checkpointsEveryCell:
		cc.EveryCell = true
	case checkpointsManual:
	default:
		return nil, usagef("--checkpoints=%s: want %s or %s", clipArg(c.mode), checkpointsEveryCell, checkpointsManual)
	}
	if c.fs.Changed("keep") && c.keep == 0 {
		return nil, usagef("--keep 0: keep at least 1 checkpoint")
	}
	if err := cc.WithDefaults().Validate(); err != nil {
		return nil, usageError{err}
	}
	return cc, nil
}

// checkpointArg reads a checkpoint's number N.
func checkpointArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usagef("%q is not a checkpoint number (1, 2, ...; cellvm checkpoint ls lists them)", clipArg(s))
	}
	return n, nil
}

// checkpointCommand is `cellvm checkpoint ls|create|restore|undo|branch`.
func (a *app) checkpointCommand() *cobra.Command {
	return groupCommand("checkpoint", "list, record, restore, undo or branch a sandbox's checkpoints (sandbox create --checkpoints turns them on)",
		a.daemonCommand(&cobra.Command{Use: "ls SANDBOX", Aliases: []string{"list"}, Short: "list a sandbox's kept checkpoints, oldest first", Args: exactArgs(1, "one SANDBOX")},
			func(ctx context.Context, c *api.Client, args []string) error {
				list, err := c.Checkpoints(ctx, args[0])
				if err != nil {
					return err
				}
				if a.jsonOut {
					if list == nil {
						list = []sandbox.CheckpointInfo{}
					}
					return printJSON(a.stdout, list)
				}
				return printCheckpoints(a, list)
			}),
		a.daemonCommand(&cobra.Command{Use: "create SANDBOX", Short: "record a checkpoint of a sandbox now and print its number (no cell may be running)", Args: exactArgs(1, "one SANDBOX")},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.printCheckpoint(c.Checkpoint(ctx, args[0]))
			}),
		a.checkpointRestoreCommand(),
		a.daemonCommand(&cobra.Command{Use: "undo SANDBOX", Short: "undo the last cell: restore the checkpoint before the last one, drop the last, and print the number restored",
			Long: "Undo the last cell of a sandbox with every-cell checkpoints: its memory, variables, files and execution\n" +
				"count go back to the checkpoint before the last one, in the same sandbox. Repeated undos walk back.\n" +
				"What the cell did outside the VM (a network call, a file sent elsewhere) is not undone.",
			Args: exactArgs(1, "one SANDBOX")},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.printCheckpoint(c.Undo(ctx, args[0]))
			}),
		a.checkpointBranchCommand(),
	)
}

// printCheckpoint prints the checkpoint a command recorded or restored:
// its number, or with --json its CheckpointInfo.
func (a *app) printCheckpoint(info sandbox.CheckpointInfo, err error) error {
	if err != nil {
		return err
	}
	if a.jsonOut {
		return printJSON(a.stdout, info)
	}
	fmt.Fprintln(a.stdout, info.N)
	return nil
}

// printCheckpoints prints checkpoints as a table.
func printCheckpoints(a *app, list []sandbox.CheckpointInfo) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "N\tKIND\tCELL\tCODE\tSIZE\tDEPTH\tPAUSE\tCREATED")
	for _, cp := range list {
		code := "-"
		if len(cp.CodeSHA256) >= 12 {
			code = cp.CodeSHA256[:12]
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.1f MiB\t%d\t%d ms\t%s\n", cp.N, cp.Kind, cp.ExecutionCount, code,
			float64(cp.SizeBytes)/(1<<20), cp.Depth, cp.PauseMS, cp.CreatedAt.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

// checkpointRestoreCommand is `cellvm checkpoint restore SANDBOX N`.
func (a *app) checkpointRestoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore SANDBOX N",
		Short: "bring a sandbox back to checkpoint N, in the same sandbox, and drop the checkpoints after it",
		Long: "Restore checkpoint N of a sandbox: its memory, variables, files and execution count go back to that\n" +
			"point, in the same sandbox id; the checkpoints after N are dropped and the next one is N+1.\n" +
			"What the sandbox did outside the VM (network calls, files sent elsewhere) is not undone.",
		Args: exactArgs(2, "SANDBOX and N"),
	}
	return a.daemonCommandChecked(cmd, func(args []string) error {
		_, err := checkpointArg(args[1])
		return err
	}, func(ctx context.Context, c *api.Client, args []string) error {
		n, _ := checkpointArg(args[1])
		return a.printCheckpoint(c.RestoreCheckpoint(ctx, args[0], n))
	})
}

// checkpointBranchCommand is `cellvm checkpoint branch SANDBOX N`: a new
// sandbox from a kept checkpoint, as sandbox fork makes one from a
// snapshot.
func (a *app) checkpointBranchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "branch SANDBOX N",
		Short: "create a sandbox from checkpoint N of a sandbox (with its variables and files) and print its id",
		Long: "Branch a new sandbox from a kept checkpoint: it starts with the checkpoint's memory, variables and\n" +
			"files, and gets its own id, fresh entropy, the host's clock and its own network. The parent is\n" +
			"untouched; several branches of one checkpoint share its pages. A branch keeps checkpoints of its\n" +
			"own only with --checkpoints.",
		Args: exactArgs(2, "SANDBOX and N"),
	}
	fs := cmd.Flags()
	var allow []string
	fs.StringSliceVar(&allow, "allow", nil, "egress allowlist entry (repeatable or comma-separated; default: no network)")
	life := addLifetimeFlags(fs)
	lf := addLabelFlags(fs, "label the branch KEY=VALUE (repeatable)")
	cf := addCheckpointFlags(fs)
	build := func(args []string) (sandbox.Config, error) {
		n, err := checkpointArg(args[1])
		if err != nil {
			return sandbox.Config{}, err
		}
		cfg := sandbox.Config{Checkpoint: &sandbox.CheckpointRef{Sandbox: args[0], N: n}}
		if cfg.Labels, err = lf.labels(); err != nil {
			return cfg, err
		}
		if cfg.Checkpoints, err = cf.config(); err != nil {
			return cfg, err
		}
		if len(allow) > 0 {
			cfg.Network = &sandbox.NetworkPolicy{Allow: allow}
		}
		life.apply(&cfg)
		if err := cfg.WithDefaults().Validate(); err != nil {
			return cfg, usageError{err}
		}
		return cfg, nil
	}
	return a.daemonCommandChecked(cmd, func(args []string) error {
		if err := life.check(); err != nil {
			return err
		}
		_, err := build(args)
		return err
	}, func(ctx context.Context, c *api.Client, args []string) error {
		cfg, _ := build(args)
		return a.printCreated(c.Create(ctx, cfg))
	})
}
