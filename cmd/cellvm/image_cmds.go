package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/image/derive"
	"github.com/cellvm/cellvm/image/store"
)

// The image commands: `cellvm image build` runs on the daemon's host and
// writes into its images directory (package image/derive does the work);
// `image ls` and `image rm` ask the daemon, which knows which sandboxes
// and snapshots use an image.

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

// imageBuildCommand is `cellvm image build NAME`: it builds on this host,
// as root, into the daemon's images directory, where the daemon finds it
// at the next create (no restart).
func (a *app) imageBuildCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build IMAGE [--apt PKG]... [--pip-wheels DIR] [--requirements FILE] [--files DIR]",
		Short: "build a root image on top of the default one (Debian packages, Python wheels, files); needs root",
		Long: "Build a read-only root image on top of the default image: Debian packages from the mirror\n" +
			"(--apt, --mirror), Python packages from a wheel directory or an index the build may reach\n" +
			"(--pip-wheels, --requirements, --pip-index; binary wheels only, so nothing runs setup.py\n" +
			"on this host), and a tree of files copied onto the root (--files). The build runs here, as\n" +
			"root, and writes IMAGES_DIR/IMAGE/; sandboxes boot it with 'cellvm sandbox create --image\n" +
			"IMAGE' or {\"image\": \"IMAGE\"}. It is keyed by its inputs: the same build again is a cache\n" +
			"hit. A failed build says which step failed and leaves the image there was as it was.",
		Args: exactArgs(1, "one IMAGE"),
	}
	fs := cmd.Flags()
	var spec derive.Spec
	var stateDir string
	fs.StringArrayVar(&spec.Apt, "apt", nil, "a Debian package to install (repeat, or space-separate in one value)")
	fs.StringVar(&spec.Mirror, "mirror", "", "the Debian mirror for --apt (default: the base image's sources.list, deb.debian.org)")
	fs.StringVar(&spec.PipWheels, "pip-wheels", "", "a directory of wheels: every *.whl in it is installed, and requirements are found there")
	fs.StringVar(&spec.Requirements, "requirements", "", "a pip requirements file, found in --pip-wheels and --pip-index")
	fs.StringVar(&spec.PipIndex, "pip-index", "", "a Python package index (PEP 503) the build may reach for --requirements")
	fs.StringVar(&spec.Files, "files", "", "a directory copied onto the image's root (DIR/etc/x becomes /etc/x), owned by root")
	fs.StringVar(&spec.Base, "base", "", "the image built on (default: the default image, build/rootfs.ext4 or $CELLVM_ROOTFS)")
	fs.StringVar(&spec.ImagesDir, "images-dir", os.Getenv("CELLVM_IMAGES_DIR"), "the daemon's images directory (default $CELLVM_IMAGES_DIR, else STATE_DIR/images)")
	fs.StringVar(&stateDir, "state-dir", "", "the daemon's state directory, whose images/ is the default images directory (default $CELLVM_STATE_DIR, else "+DefaultStateDir+")")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		spec.Name = args[0]
		if !store.ValidName(spec.Name) {
			return usagef("%q is not an image name (1 to %d of a-z, 0-9, '-', '_', '.', starting with a letter or digit; not \"default\")", clipArg(spec.Name), store.MaxName)
		}
		var apt []string
		for _, v := range spec.Apt {
			apt = append(apt, strings.Fields(v)...)
		}
		spec.Apt = apt
		if spec.ImagesDir == "" {
			spec.ImagesDir = filepath.Join(StateDir(stateDir), "images")
		}
		if spec.Base == "" {
			spec.Base = os.Getenv("CELLVM_ROOTFS")
		}
		if spec.Base == "" {
			if spec.Base = findBuildFile("rootfs.ext4"); spec.Base == "" {
				return usagef("no base image (build/rootfs.ext4): run 'make image', or give --base or $CELLVM_ROOTFS")
			}
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		start := time.Now()
		fmt.Fprintf(a.stderr, "cellvm image build %s: on %s, into %s\n", spec.Name, spec.Base, spec.ImagesDir)
		res, err := derive.Build(ctx, spec, a.stderr)
		if err != nil {
			var se *derive.StepError
			if errors.As(err, &se) {
				return fmt.Errorf("image %s: %w", spec.Name, err)
			}
			return usageError{fmt.Errorf("image %s: %w", spec.Name, err)}
		}
		if a.jsonOut {
			return printJSON(a.stdout, res.Record)
		}
		verb := "built"
		if res.CacheHit {
			verb = "up to date"
		}
		fmt.Fprintf(a.stdout, "image %s %s: %s (%d MiB, key %s) in %.1f s; boot it with: cellvm sandbox create --image %s\n",
			spec.Name, verb, filepath.Join(res.Dir, store.ImageFile), res.Record.SizeBytes>>20, res.Key[:12], time.Since(start).Seconds(), spec.Name)
		return nil
	}
	return cmd
}
