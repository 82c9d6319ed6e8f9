package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/image/derive"
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
				return a.removeEach(ctx, "cellvm workspace rm", args, c.DeleteWorkspace)
			}),
	)
}

// imageCommand is `cellvm image build|ls|rm`.
func (a *app) imageCommand() *cobra.Command {
	return groupCommand("image", "build, list or remove the root images the daemon's sandboxes can boot (cellvm sandbox create --image NAME)",
		a.imageBuildCommand(),
		a.daemonCommandChecked(&cobra.Command{Use: "rm IMAGE...", Aliases: []string{"remove"}, Short: "remove built images (refused while a sandbox or a snapshot uses one)", Args: minArgs(1, "at least one IMAGE")},
			func(args []string) error {
				for _, name := range args {
					if !derive.ValidName(name) {
						return usagef("%q is not the name of a built image (1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit; the default image is the daemon's own)", clipArg(name), derive.MaxName)
					}
				}
				return nil
			},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.removeEach(ctx, "cellvm image rm", args, c.DeleteImage)
			}),
		a.daemonCommand(&cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "list the daemon's images", Args: noArgs},
			func(ctx context.Context, c *api.Client, _ []string) error {
				list, err := c.Images(ctx)
				if err != nil {
					return err
				}
				if a.jsonOut {
					return printJSON(a.stdout, list)
				}
				tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tSIZE\tPYTHON\tSANDBOXES\tBUILT")
				for _, im := range list {
					py := im.Python
					if py == "" {
						py = "-"
					}
					fmt.Fprintf(tw, "%s\t%d MiB\t%s\t%d\t%s\n", im.Name, im.SizeBytes>>20, py, im.Sandboxes, im.BuiltAt.Local().Format(time.DateTime))
				}
				return tw.Flush()
			}),
	)
}
