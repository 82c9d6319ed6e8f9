package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/image/store"
)

// The image commands: `image ls` and `image rm` ask the daemon, which
// knows which sandboxes and snapshots use an image; `image build` is the
// daemon's too (it makes every image in a builder microVM).

// imageCommand is `cellvm image build|ls|rm`.
func (a *app) imageCommand() *cobra.Command {
	return groupCommand("image", "build, list or remove the root images the daemon's sandboxes can boot (cellvm sandbox create --image NAME)",
		a.imageBuildCommand(),
		a.daemonCommandChecked(&cobra.Command{Use: "rm IMAGE...", Aliases: []string{"remove"}, Short: "remove built images (refused while a sandbox or a snapshot uses one)", Args: minArgs(1, "at least one IMAGE")},
			func(args []string) error {
				for _, name := range args {
					if !store.ValidName(name) {
						return usagef("%q is not the name of a built image (1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit; the default image is the daemon's own)", clipArg(name), store.MaxName)
					}
				}
				return nil
			},
			func(ctx context.Context, c *api.Client, args []string) error {
				return a.removeEach(ctx, "cellvm image rm", "name", args, c.DeleteImage)
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

// imageBuildCommand is `cellvm image build NAME`. The host-side builder
// is gone: every image is made by the daemon in a builder microVM
// (Manager.CreateImage). This stub stays until the CLI asks the daemon's
// API for it.
func (a *app) imageBuildCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "build IMAGE",
		Short: "build a root image (made by the daemon in a builder microVM)",
		Args:  exactArgs(1, "one IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return errors.New("cellvm image build: images are made by the daemon now (POST /v1/images); this command does not ask it yet")
		},
	}
}
