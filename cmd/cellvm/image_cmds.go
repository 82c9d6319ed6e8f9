package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// The image commands all ask the daemon: every image is made inside one
// of its builder microVMs (build, pull, import; this host runs nothing
// of an image), and it knows which sandboxes and snapshots use one.

// imageCommand is `cellvm image build|pull|import|ls|rm`.
func (a *app) imageCommand() *cobra.Command {
	return groupCommand("image", "build, pull, import, list or remove the root images the daemon's sandboxes can boot (cellvm sandbox create --image NAME)",
		a.imageBuildCommand(),
		a.imagePullCommand(),
		a.imageImportCommand(),
		a.daemonCommandChecked(&cobra.Command{Use: "rm IMAGE...", Aliases: []string{"remove"}, Short: "remove images (refused while a sandbox or a snapshot uses one)", Args: minArgs(1, "at least one IMAGE")},
			func(args []string) error {
				for _, name := range args {
					if err := checkImageName(name); err != nil {
						return err
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
				fmt.Fprintln(tw, "NAME\tSIZE\tPYTHON\tSOURCE\tREF\tDIGEST\tSANDBOXES\tBUILT")
				for _, im := range list {
					ref := im.Ref
					if im.Source == sandbox.ImageSourceBuild {
						ref = "on " + cmpOrDash(im.Base, sandbox.DefaultImage)
					}
					fmt.Fprintf(tw, "%s\t%d MiB\t%s\t%s\t%s\t%s\t%d\t%s\n", im.Name, im.SizeBytes>>20, cmpOrDash(im.Python, "-"),
						cmpOrDash(im.Source, "-"), cmpOrDash(clipArg(ref), "-"), cmpOrDash(shortDigest(im.Digest), "-"),
						im.Sandboxes, im.BuiltAt.Local().Format(time.DateTime))
				}
				return tw.Flush()
			}),
	)
}

// checkImageName refuses, as a usage error, a name no image can have.
func checkImageName(name string) error {
	if !sandbox.ValidImageName(name) || name == sandbox.DefaultImage {
		return usagef("%q is not a name an image can be given (1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit; \"default\" is the daemon's own)",
			clipArg(name), sandbox.MaxWorkspaceName)
	}
	return nil
}

func cmpOrDash(s, dash string) string {
	if s == "" {
		return dash
	}
	return s
}

// shortDigest is sha256:0123456789ab of a digest.
func shortDigest(d string) string {
	algo, hex, ok := strings.Cut(d, ":")
	if !ok {
		return d
	}
	if len(hex) > 12 {
		hex = hex[:12]
	}
	return algo + ":" + hex
}
