package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// lifetimeFlags are a new sandbox's --ttl, --idle-timeout and
// --idle-pause. Without --ttl or --idle-timeout the daemon's default
// applies (serve --default-ttl, --default-idle-timeout); 0 asks for none.
type lifetimeFlags struct {
	fs                   *pflag.FlagSet
	ttl, idle, idlePause time.Duration
}

func addLifetimeFlags(fs *pflag.FlagSet) *lifetimeFlags {
	l := &lifetimeFlags{fs: fs}
	fs.DurationVar(&l.ttl, "ttl", 0, "destroy the sandbox this long after its creation (whole seconds; 0: never; default: the daemon's, serve --default-ttl)")
	fs.DurationVar(&l.idle, "idle-timeout", 0, "destroy the sandbox after this long unused (whole seconds; 0: never; default: the daemon's, serve --default-idle-timeout)")
	fs.DurationVar(&l.idlePause, "idle-pause", 0, "pause the sandbox to disk after this long unused; the next call resumes it (whole seconds; 0: never)")
	return l
}

// check refuses what the daemon would: negative, sub-second or fractional
// durations.
func (l *lifetimeFlags) check() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--ttl", l.ttl}, {"--idle-timeout", l.idle}, {"--idle-pause", l.idlePause}} {
		switch {
		case d.v < 0:
			return usagef("%s %v is negative", d.name, d.v)
		case d.v > 0 && d.v < time.Second:
			return usagef("%s %v is under 1s (0 means never)", d.name, d.v)
		case d.v%time.Second != 0:
			return usagef("%s %v: give whole seconds", d.name, d.v)
		case d.v > sandbox.MaxTTL:
			return usagef("%s %v is above the maximum %v", d.name, d.v, sandbox.MaxTTL)
		}
	}
	return nil
}

func (l *lifetimeFlags) apply(cfg *sandbox.Config) {
	cfg.TTL, cfg.IdleTimeout, cfg.IdlePause = l.lifetime("ttl", l.ttl), l.lifetime("idle-timeout", l.idle), l.idlePause
}

// lifetime is a --ttl or --idle-timeout as the Config says it: 0 (the
// daemon's default) when not given, Never when given as 0.
func (l *lifetimeFlags) lifetime(flag string, v time.Duration) time.Duration {
	switch {
	case !l.fs.Changed(flag):
		return 0
	case v == 0:
		return sandbox.Never
	}
	return v
}

// snapshotArg checks a SNAPSHOT argument before the daemon is called.
func snapshotArg(id string) error {
	if !sandbox.ValidSnapshotID(id) {
		return usagef("%q is not a snapshot id (snap- and 12 hex digits; cellvm snapshot ls lists them)", clipArg(id))
	}
	return nil
}

// sandboxSnapshotCommand is `cellvm sandbox snapshot SANDBOX`.
func (a *app) sandboxSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot SANDBOX",
		Short: "snapshot a sandbox's machine (memory, variables, files) and print the snapshot's id; the sandbox keeps running",
		Args:  exactArgs(1, "one SANDBOX"),
	}
	return a.daemonCommand(cmd, func(ctx context.Context, c *api.Client, args []string) error {
		snap, err := c.Snapshot(ctx, args[0])
		if err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, snap)
		}
		fmt.Fprintln(a.stdout, snap.ID)
		return nil
	})
}

// sandboxForkCommand is `cellvm sandbox fork SNAPSHOT`: a new sandbox
// that starts from the snapshot's machine.
func (a *app) sandboxForkCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fork SNAPSHOT",
		Short: "create a sandbox from a snapshot (with its variables) and print its id",
		Long: "Create a sandbox from a snapshot: it starts with the snapshot's memory, so its interpreter has the\n" +
			"snapshot's variables, and gets its own id, fresh entropy and the host's clock. Its vCPUs and memory\n" +
			"are the snapshot's (--vcpus and --memory, when given, must match them).",
		Args: exactArgs(1, "one SNAPSHOT"),
	}
	fs := cmd.Flags()
	var vcpus, memory int
	var env, allow []string
	fs.IntVar(&vcpus, "vcpus", 0, "vCPUs (0: the snapshot's)")
	fs.IntVar(&memory, "memory", 0, "guest memory in MiB (0: the snapshot's)")
	fs.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE for the sandbox's commands (repeatable; default: the snapshot's)")
	fs.StringSliceVar(&allow, "allow", nil, "egress allowlist entry (repeatable or comma-separated; default: no network)")
	life := addLifetimeFlags(fs)
	lf := addLabelFlags(fs, "label the fork KEY=VALUE (repeatable; a fork has none of its parent's labels unless given)")
	build := func(snapID string) (sandbox.Config, error) {
		cfg := sandbox.Config{Snapshot: snapID, VCPUs: vcpus, MemoryMiB: memory}
		var err error
		if cfg.Labels, err = lf.labels(); err != nil {
			return cfg, err
		}
		if len(allow) > 0 {
			cfg.Network = &sandbox.NetworkPolicy{Allow: allow}
		}
		if cfg.Env, err = parseEnv(env); err != nil {
			return cfg, err
		}
		life.apply(&cfg)
		// Zero vCPUs and memory are the snapshot's; check the rest.
		check := cfg
		if check.VCPUs == 0 {
			check.VCPUs = sandbox.DefaultVCPUs
		}
		if check.MemoryMiB == 0 {
			check.MemoryMiB = sandbox.DefaultMemoryMiB
		}
		if err := check.Validate(); err != nil {
			return cfg, usageError{err}
		}
		return cfg, nil
	}
	return a.daemonCommandChecked(cmd, func(args []string) error {
		if err := snapshotArg(args[0]); err != nil {
			return err
		}
		if err := life.check(); err != nil {
			return err
		}
		_, err := build(args[0])
		return err
	}, func(ctx context.Context, c *api.Client, args []string) error {
		cfg, _ := build(args[0])
		return a.printCreated(c.Create(ctx, cfg))
	})
}

// snapshotCommand is `cellvm snapshot ls|inspect|rm`.
func (a *app) snapshotCommand() *cobra.Command {
	return groupCommand("snapshot", "list, inspect or remove the daemon's snapshots (cellvm sandbox snapshot takes one, cellvm sandbox fork starts from one)",
		a.daemonCommand(&cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "list the daemon's snapshots", Args: noArgs},
			func(ctx context.Context, c *api.Client, _ []string) error {
				list, err := c.ListSnapshots(ctx)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return printJSON(a.stdout, list)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tSANDBOX\tVCPUS\tMEMORY\tSIZE\tCREATED")
				for _, s := range list {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%d MiB\t%.1f MiB\t%s\n", s.ID, s.SandboxID, s.VCPUs, s.MemoryMiB,
						float64(s.SizeBytes)/(1<<20), s.CreatedAt.Local().Format(time.DateTime))
				}
				return tw.Flush()
			}),
		a.daemonCommandChecked(&cobra.Command{Use: "inspect SNAPSHOT", Short: "print a snapshot's details as JSON", Args: exactArgs(1, "one SNAPSHOT")},
			func(args []string) error { return snapshotArg(args[0]) },
			func(ctx context.Context, c *api.Client, args []string) error {
				info, err := c.GetSnapshot(ctx, args[0])
				if err != nil {
					return err
				}
				return printJSON(a.stdout, info)
			}),
		a.daemonCommandChecked(&cobra.Command{Use: "rm SNAPSHOT...", Aliases: []string{"remove"}, Short: "remove snapshots (their running forks are not affected)", Args: minArgs(1, "at least one SNAPSHOT")},
			func(args []string) error {
				for _, id := range args {
					if err := snapshotArg(id); err != nil {
						return err
					}
				}
				return nil
			},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.removeEach(ctx, "cellvm snapshot rm", "id", args, c.DeleteSnapshot)
			}),
	)
}
