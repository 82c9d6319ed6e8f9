package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// workspaceArg checks a WORKSPACE argument before the daemon is called.
func workspaceArg(name string) error {
	if !sandbox.ValidWorkspaceName(name) {
		return usagef("%q is not a workspace name (1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit)", clipArg(name), sandbox.MaxWorkspaceName)
	}
	return nil
}

// workspaceCommand is `cellvm workspace ls|rm`.
func (a *app) workspaceCommand() *cobra.Command {
	return groupCommand("workspace", "list or remove the daemon's workspaces: volumes kept across sandboxes (cellvm sandbox create --workspace NAME mounts one at /workspace)",
		a.daemonCommand(&cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "list the daemon's workspaces", Args: noArgs},
			func(ctx context.Context, c *api.Client, _ []string) error {
				list, err := c.Workspaces(ctx)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return printJSON(a.stdout, list)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSANDBOX\tUSED\tSIZE\tCREATED")
				for _, w := range list {
					holder := w.Sandbox
					if holder == "" {
						holder = "-"
					}
					fmt.Fprintf(tw, "%s\t%s\t%.1f MiB\t%d MiB\t%s\n", w.Name, holder, float64(w.DiskBytes)/(1<<20), w.SizeBytes>>20,
						w.CreatedAt.Local().Format(time.DateTime))
				}
				return tw.Flush()
			}),
		a.daemonCommandChecked(&cobra.Command{Use: "rm WORKSPACE...", Aliases: []string{"remove"}, Short: "remove workspaces and their files (refused while a sandbox holds one)", Args: minArgs(1, "at least one WORKSPACE")},
			func(args []string) error {
				for _, name := range args {
					if err := workspaceArg(name); err != nil {
						return err
					}
				}
				return nil
			},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.removeEach(ctx, "cellvm workspace rm", "name", args, c.DeleteWorkspace)
			}),
	)
}
