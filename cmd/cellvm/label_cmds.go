package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// Labels on the command line: `sandbox create -l run=42`, `sandbox ls -l
// run=42 --state running --format '{{.ID}}' -q`, and `sandbox ttl` (the
// lifetime E2B's setTimeout sets). A label is the caller's key=value
// metadata (sandbox/labels.go); the daemon keeps it and filters by it, so
// scripts find what they made without keeping ids.

// labelFlags is a repeatable -l/--label KEY=VALUE.
type labelFlags struct{ raw []string }

func addLabelFlags(fs *pflag.FlagSet, usage string) *labelFlags {
	l := &labelFlags{}
	fs.StringArrayVarP(&l.raw, "label", "l", nil, usage)
	return l
}

// labels parses the flags: a usage error (exit 2) for a malformed one,
// nil for none.
func (l *labelFlags) labels() (map[string]string, error) {
	if len(l.raw) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range l.raw {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usagef("--label %q: give KEY=VALUE", clipArg(kv))
		}
		if old, dup := m[k]; dup && old != v {
			return nil, usagef("--label %q is given twice with different values", clipArg(k))
		}
		m[k] = v
	}
	if err := sandbox.ValidateLabels(m); err != nil {
		return nil, usageError{err}
	}
	return m, nil
}

// sandboxLsCommand: cellvm sandbox ls [-l K=V]... [--state S]... [--format
// TEMPLATE | -q].
func (a *app) sandboxLsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "list the daemon's sandboxes, filtered by label and state",
		Long: "List the daemon's sandboxes (a tenant's own), oldest first. -l K=V keeps those with the label\n" +
			"(repeat: all must match); --state keeps those in one of the states (repeat or commas: starting,\n" +
			"running, paused, lost, stopping). -q prints the ids only; --format prints a Go template per\n" +
			"sandbox over its info's Go fields, e.g. '{{.ID}} {{.State}} {{index .Config.Labels \"run\"}}'.",
		Args: noArgs,
	}
	fs := cmd.Flags()
	lf := addLabelFlags(fs, "only sandboxes with this label KEY=VALUE (repeatable; all must match)")
	var states []string
	var format string
	var quiet bool
	fs.StringSliceVar(&states, "state", nil, "only sandboxes in this state (repeatable or comma-separated)")
	fs.StringVar(&format, "format", "", "print each sandbox with this Go template over sandbox.Info (.ID, .State, .CreatedAt, .Config.Labels, ...)")
	fs.BoolVarP(&quiet, "quiet", "q", false, "print only the ids, one a line")
	var q api.ListQuery
	var tmpl *template.Template
	check := func([]string) error {
		var err error
		if q.Filter.Labels, err = lf.labels(); err != nil {
			return err
		}
		q.Filter.States = nil
		for _, s := range states {
			st := sandbox.State(strings.TrimSpace(s))
			if !slices.Contains([]sandbox.State{sandbox.StateStarting, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateLost, sandbox.StateStopping}, st) {
				return usagef("--state %q: one of starting, running, paused, lost, stopping", clipArg(s))
			}
			q.Filter.States = append(q.Filter.States, st)
		}
		n := 0
		for _, set := range []bool{quiet, format != "", a.jsonOut} {
			if set {
				n++
			}
		}
		if n > 1 {
			return usagef("give one of -q, --format and --json")
		}
		if format != "" {
			if tmpl, err = template.New("format").Option("missingkey=zero").Parse(format); err != nil {
				return usagef("--format: %v", err)
			}
		}
		return nil
	}
	return a.daemonCommandChecked(cmd, check, func(ctx context.Context, c *api.Client, _ []string) error {
		lr, err := c.ListPage(ctx, q)
		if err != nil {
			return err
		}
		list := lr.Sandboxes
		switch {
		case a.jsonOut:
			return printJSON(a.stdout, list)
		case quiet:
			for _, s := range list {
				fmt.Fprintln(a.stdout, s.ID)
			}
			return nil
		case tmpl != nil:
			return printFormatted(a, tmpl, list)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tSTATE\tVCPUS\tMEMORY\tUPTIME\tCELLS\tLABELS")
		for _, s := range list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d MiB\t%s\t%d\t%s\n", s.ID, s.State, s.Config.VCPUs, s.Config.MemoryMiB,
				(time.Duration(s.UptimeS) * time.Second).String(), s.Cells, labelsText(s.Config.Labels))
		}
		return tw.Flush()
	})
}

// printFormatted runs tmpl over each sandbox's info (sandbox.Info, whose
// Go fields are the template's), a line each.
func printFormatted(a *app, tmpl *template.Template, list []sandbox.Info) error {
	for _, s := range list {
		var b strings.Builder
		if err := tmpl.Execute(&b, s); err != nil {
			return fmt.Errorf("--format: %w", err)
		}
		fmt.Fprintln(a.stdout, b.String())
	}
	return nil
}

// labelsText is labels as k=v,k=v sorted by key, cut to fit a table.
func labelsText(l map[string]string) string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+l[k])
	}
	s := strings.Join(parts, ",")
	// Labels are the caller's text: a control character would redraw the
	// terminal (ValidateLabels refuses them; this table trusts no daemon).
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return s
}

// sandboxTTLCommand: cellvm sandbox ttl SANDBOX DURATION.
func (a *app) sandboxTTLCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ttl SANDBOX DURATION",
		Short: "give a sandbox DURATION more to live, counted from now (whole seconds, e.g. 30m)",
		Args:  exactArgs(2, "SANDBOX and DURATION"),
	}
	var ttl time.Duration
	return a.daemonCommandChecked(cmd, func(args []string) error {
		var err error
		ttl, err = time.ParseDuration(args[1])
		switch {
		case err != nil:
			return usagef("DURATION %q: %v", clipArg(args[1]), err)
		case ttl < time.Second || ttl%time.Second != 0:
			return usagef("DURATION %v: give whole seconds, at least 1s", ttl)
		case ttl > sandbox.MaxTTL:
			return usagef("DURATION %v is above the maximum %v", ttl, sandbox.MaxTTL)
		}
		return nil
	}, func(ctx context.Context, c *api.Client, args []string) error {
		info, err := c.SetTTL(ctx, args[0], ttl)
		if err != nil {
			return err
		}
		if a.jsonOut {
			return printJSON(a.stdout, info)
		}
		fmt.Fprintf(a.stdout, "%s ends %s from its creation\n", info.ID, info.Config.TTL)
		return nil
	})
}
