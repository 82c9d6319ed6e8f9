package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/image/recipe"
	"github.com/cellvm/cellvm/sandbox"
)

// imagePullCommand is `cellvm image pull REF [--name NAME]`: the daemon
// fetches the image (digests checked, sizes bounded) and applies its
// layers inside a builder microVM.
func (a *app) imagePullCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pull REF [--name NAME] [--insecure] [--platform linux/amd64] [--registry-token TOKEN] [--replace] [--timeout 30m]",
		Short: "pull an OCI image from a registry into the daemon (sandboxes then boot it with cellvm's guest)",
		Long: "Pull an OCI image (registry/repo:tag or @sha256:...) into the daemon's images. The daemon\n" +
			"fetches it, checks its digests and sizes, and applies its layers inside a builder microVM;\n" +
			"this host never unpacks it. Sandboxes boot it with cellvm's guest and its env, working\n" +
			"directory and user. --name defaults to REF with '/', ':' and '@' made '-' (python:slim\n" +
			"becomes python-slim). The registry token comes from --registry-token or\n" +
			"$CELLVM_REGISTRY_TOKEN; it is never logged or recorded.",
		Args: exactArgs(1, "one REF"),
	}
	fs := cmd.Flags()
	var name, platform, token string
	var insecure bool
	fs.StringVar(&name, "name", "", "the image's name (default: REF with '/', ':' and '@' made '-')")
	fs.BoolVar(&insecure, "insecure", false, "allow a registry over plain HTTP or with a certificate that does not verify")
	fs.StringVar(&platform, "platform", "linux/amd64", "the platform picked from a multi-platform image (the guest runs linux/amd64)")
	fs.StringVar(&token, "registry-token", "", "a bearer token for the registry (default $CELLVM_REGISTRY_TOKEN; prefer the variable: a flag shows in ps)")
	rf := addImageReqFlags(fs)
	var req sandbox.ImageRequest
	return a.daemonCommandChecked(cmd, func(args []string) error {
		ref := args[0]
		if name == "" {
			if name = recipe.ImageNameFor(ref); name == "" {
				return usagef("no image name can be made of %q: give --name", clipArg(ref))
			}
		}
		if err := checkImageName(name); err != nil {
			return err
		}
		if token == "" {
			token = os.Getenv("CELLVM_REGISTRY_TOKEN")
		}
		req = sandbox.ImageRequest{Name: name, Pull: ref, Platform: platform, Insecure: insecure, RegistryToken: token}
		if err := rf.apply(&req); err != nil {
			return err
		}
		if err := req.Validate(); err != nil {
			return usageError{err}
		}
		return nil
	}, func(ctx context.Context, c *api.Client, _ []string) error {
		return a.createImage(ctx, c, req, "pulled")
	})
}

// imageImportCommand is `cellvm image import FILE --name NAME`: a docker
// save tarball or an OCI layout tar, streamed to the daemon.
func (a *app) imageImportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import FILE --name NAME [--replace] [--timeout 30m]",
		Short: "import a docker save tarball or an OCI image layout tar (FILE, or - for stdin) into the daemon",
		Long: "Import an image from FILE ('-' reads stdin): the tar `docker save` writes, or an OCI image\n" +
			"layout as a tar. It is streamed to the daemon, which checks it and applies its layers inside\n" +
			"a builder microVM; the daemon's --max-image-upload-mib bounds it.",
		Args: exactArgs(1, "one FILE (or - for stdin)"),
	}
	fs := cmd.Flags()
	var name string
	fs.StringVar(&name, "name", "", "the image's name (required)")
	rf := addImageReqFlags(fs)
	var req sandbox.ImageRequest
	var archive io.ReadCloser
	return a.daemonCommandChecked(cmd, func(args []string) error {
		if name == "" {
			return usagef("give the image a --name")
		}
		if err := checkImageName(name); err != nil {
			return err
		}
		req = sandbox.ImageRequest{Name: name, Import: true}
		if err := rf.apply(&req); err != nil {
			return err
		}
		if args[0] == "-" {
			archive = io.NopCloser(a.stdin)
		} else {
			f, err := os.Open(args[0])
			if err != nil {
				return usageError{fmt.Errorf("the archive: %w", err)}
			}
			if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
				f.Close()
				return usagef("%s is not a regular file (a docker save tarball or an OCI layout tar; '-' reads stdin)", clipArg(args[0]))
			}
			if strings.HasSuffix(args[0], ".gz") || strings.HasSuffix(args[0], ".tgz") {
				f.Close()
				return usagef("%s looks compressed: give the tar itself (gunzip -c %s | cellvm image import - --name %s)", clipArg(args[0]), clipArg(args[0]), name)
			}
			archive = f
		}
		req.Archive = archive
		return nil
	}, func(ctx context.Context, c *api.Client, _ []string) error {
		defer archive.Close()
		return a.createImage(ctx, c, req, "imported")
	})
}
