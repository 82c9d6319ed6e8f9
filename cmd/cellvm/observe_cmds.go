package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// networkCommand is `cellvm network set SANDBOX ENTRY...`.
func (a *app) networkCommand() *cobra.Command {
	set := &cobra.Command{
		Use:   "set SANDBOX [ENTRY...]",
		Short: "replace a sandbox's egress allowlist (addresses, CIDRs, names, *.names, with optional :port)",
		Args:  minArgs(1, "a SANDBOX and its allowlist entries (or --none)"),
	}
	var none bool
	set.Flags().BoolVar(&none, "none", false, "allow no egress at all")
	a.daemonCommandChecked(set, func(args []string) error {
		if none == (len(args) > 1) {
			return usagef("give allowlist entries or --none, not both and not neither")
		}
		if err := (sandbox.NetworkPolicy{Allow: args[1:]}).Validate(); err != nil {
			return usageError{err}
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		p := sandbox.NetworkPolicy{Allow: append([]string{}, args[1:]...)}
		if err := c.SetNetwork(ctx, args[0], p); err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, map[string]any{"id": args[0], "network": p})
		}
		return nil
	})
	return groupCommand("network", "change a sandbox's network policy", set)
}

// logsCommand is `cellvm logs SANDBOX [-f]`.
func (a *app) logsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs SANDBOX",
		Short: "print a sandbox's console, agent or VMM log (-f: follow)",
		Long: "Print the last lines of one of a sandbox's logs: console (the guest's serial console),\n" +
			"agent (the guest init's and agent's log records) or vmm (the VMM process's log).\n" +
			"With -f, keep printing new lines until interrupted or the sandbox is deleted.",
		Args: exactArgs(1, "one SANDBOX"),
	}
	var src string
	var tail int
	var follow bool
	cmd.Flags().StringVar(&src, "source", string(sandbox.LogConsole), "which log: console, agent or vmm")
	cmd.Flags().IntVarP(&tail, "tail", "n", sandbox.DefaultLogTail, fmt.Sprintf("how many of the last lines to print first (0..%d)", sandbox.MaxLogTail))
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing lines as they are written")
	req := func() sandbox.LogRequest {
		return sandbox.LogRequest{Source: sandbox.LogSource(src), Tail: tail, Follow: follow}
	}
	return a.daemonCommandChecked(cmd, func([]string) error {
		if err := req().Validate(); err != nil {
			return usageError{err}
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return c.Logs(ctx, args[0], req(), func(l sandbox.LogLine) error {
			if a.jsonOut {
				return printJSONLine(a.stdout, l)
			}
			_, err := fmt.Fprintln(a.stdout, l.Text)
			return err
		})
	})
}

// statsCommand is `cellvm stats [SANDBOX...]`: host capacity and what each
// sandbox uses.
func (a *app) statsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stats [SANDBOX...]",
		Short: "print the host's capacity and each sandbox's memory, CPU, cells and egress",
	}
	return a.daemonCommand(cmd, func(ctx context.Context, c *api.Client, args []string) error {
		capy, err := c.Capacity(ctx)
		if err != nil {
			return err
		}
		var list []sandbox.Info
		if len(args) == 0 {
			if list, err = c.List(ctx); err != nil {
				return err
			}
		}
		for _, id := range args {
			info, err := c.Get(ctx, id)
			if err != nil {
				return err
			}
			list = append(list, info)
		}
		if a.jsonOut {
			return printJSON(a.stdout, map[string]any{"capacity": capy, "sandboxes": list})
		}
		fmt.Fprintf(a.stdout, "host: %d sandboxes (cap %s), %d MiB guest memory (cap %s), %d vCPUs\n",
			capy.Sandboxes, capText(capy.MaxSandboxes), capy.MemoryMiBUsed, capText(capy.MaxMemoryMiB), capy.VCPUsUsed)
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tRSS\tCPU\tCELLS\tEGRESS OK\tEGRESS DROPPED")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d MiB\t%.1fs\t%d\t%d\t%d\n", s.ID, s.State, s.Usage.MemoryBytes>>20,
				float64(s.Usage.CPUTimeMS)/1000, s.Cells, s.Network.AllowedPackets, s.Network.DroppedPackets)
		}
		return tw.Flush()
	})
}

func capText(n int) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// eventsCommand is `cellvm events`: the daemon's lifecycle events as they
// happen, until interrupted.
func (a *app) eventsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "print the daemon's sandbox events (created, lost, deleted, paused, resumed, policy_changed) as they happen",
		Args:  noArgs,
	}
	return a.daemonCommand(cmd, func(ctx context.Context, c *api.Client, _ []string) error {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		st, err := c.Events(ctx)
		if err != nil {
			return err
		}
		defer st.Close()
		// Said once subscribed, so a supervisor (or a test) knows that no
		// later event will be missed.
		fmt.Fprintln(a.stderr, "cellvm events: watching (Ctrl-C to stop)")
		for {
			ev, err := st.Next(ctx)
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if a.jsonOut {
				printJSONLine(a.stdout, ev)
				continue
			}
			line := fmt.Sprintf("%s %s %s", ev.Time.Format("15:04:05.000"), ev.Type, ev.Sandbox)
			switch {
			case ev.Lost != nil:
				line += fmt.Sprintf(": %s (%s)", ev.Lost.Reason, ev.Lost.Exit)
			case ev.Reason != "":
				line += " (" + ev.Reason + ")"
			case ev.Network != nil:
				line += fmt.Sprintf(" allow %v", ev.Network.Allow)
			}
			fmt.Fprintln(a.stdout, line)
		}
	})
}
