package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/image/recipe"
	"github.com/cellvm/cellvm/sandbox"
)

// maxBuildInputs bounds the local files a build sends (wheels,
// requirements, files, a Dockerfile's COPY sources).
const maxBuildInputs = 8 << 30

// Where the build's flags put their files in the recipe's archive.
const (
	archiveWheels       = "wheels"
	archiveRequirements = "requirements.txt"
	archiveFiles        = "files"
)

// imageBuildCommand is `cellvm image build NAME`: a recipe (from the
// flags, or a Dockerfile with -f) sent to the daemon, which runs it in a
// builder microVM on a base image. The local files it names are packed
// here into the request's archive and streamed.
func (a *app) imageBuildCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build IMAGE [--apt PKG]... [--mirror URL] [--pip-wheels DIR] [--requirements FILE] [--pip-index URL] [--files DIR] [--base IMAGE] [-f DOCKERFILE] [--timeout 30m] [--replace]",
		Short: "build a root image on a base image (Debian packages, Python wheels, files, or a Dockerfile) in the daemon",
		Long: "Build a read-only root image on a base image, inside one of the daemon's builder microVMs:\n" +
			"Debian packages (--apt, --mirror), Python packages from a wheel directory and an index the\n" +
			"build may reach (--pip-wheels, --requirements, --pip-index; binary wheels only), then a tree\n" +
			"of files copied onto the root (--files DIR: DIR/etc/x becomes /etc/x), in that order. Or\n" +
			"-f DOCKERFILE: FROM (a cellvm image), RUN, COPY, ENV, WORKDIR and USER, COPY's sources\n" +
			"in the Dockerfile's directory. --base is the image built on (default: the daemon's own;\n" +
			"any image built, pulled or imported). Local files are sent with the request; nothing of\n" +
			"the image runs on this host. A failed build names its step and shows the end of its\n" +
			"output, and leaves the image there was as it was.",
		Args: exactArgs(1, "one IMAGE"),
	}
	fs := cmd.Flags()
	var apt []string
	var mirror, wheels, requirements, index, files, base, dockerfile string
	fs.StringArrayVar(&apt, "apt", nil, "a Debian package to install (repeat, or space-separate in one value)")
	fs.StringVar(&mirror, "mirror", "", "the Debian mirror for --apt (default: the base image's sources)")
	fs.StringVar(&wheels, "pip-wheels", "", "a directory of wheels: every *.whl in it is installed, and requirements are found there")
	fs.StringVar(&requirements, "requirements", "", "a pip requirements file, found in --pip-wheels and --pip-index")
	fs.StringVar(&index, "pip-index", "", "a Python package index (PEP 503) the build may reach for --requirements")
	fs.StringVar(&files, "files", "", "a directory copied onto the image's root (DIR/etc/x becomes /etc/x), owned by root, modes and links kept")
	fs.StringVar(&base, "base", "", "the image built on (default: the daemon's own image)")
	fs.StringVarP(&dockerfile, "file", "f", "", "a Dockerfile (a subset: FROM, RUN, COPY, ENV, WORKDIR, USER) instead of the flags above")
	rf := addImageReqFlags(fs)
	var req sandbox.ImageRequest
	var inputs []recipe.ArchiveFile
	var root string
	return a.daemonCommandChecked(cmd, func(args []string) error {
		if err := checkImageName(args[0]); err != nil {
			return err
		}
		req = sandbox.ImageRequest{Name: args[0]}
		if err := rf.apply(&req); err != nil {
			return err
		}
		var rc *sandbox.ImageRecipe
		var err error
		if dockerfile != "" {
			if len(apt) > 0 || mirror != "" || wheels != "" || requirements != "" || index != "" || files != "" || base != "" {
				return usagef("-f takes the whole recipe from the Dockerfile: --apt, --mirror, --pip-*, --requirements, --files and --base go with the flags' recipe only")
			}
			rc, inputs, root, err = a.dockerfileRecipe(dockerfile)
		} else {
			rc, inputs, err = flagsRecipe(apt, mirror, wheels, requirements, index, files, base)
		}
		if err != nil {
			return err
		}
		req.Recipe = rc
		if err := req.Validate(); err != nil {
			return usageError{err}
		}
		if _, err := recipe.Scan(inputs, root, maxBuildInputs); err != nil {
			return usageError{err}
		}
		return nil
	}, func(ctx context.Context, c *api.Client, _ []string) error {
		if len(inputs) > 0 {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(recipe.WriteArchive(pw, inputs, root, maxBuildInputs)) }()
			defer pr.Close()
			req.Archive = pr
		}
		err := a.createImage(ctx, c, req, "built")
		if errors.Is(err, recipe.ErrBadInput) {
			return usageError{err}
		}
		return err
	})
}

// flagsRecipe is the recipe the flags ask for: apt, pip, then files.
func flagsRecipe(apt []string, mirror, wheels, requirements, index, files, base string) (*sandbox.ImageRecipe, []recipe.ArchiveFile, error) {
	rc := &sandbox.ImageRecipe{Base: base}
	if base == sandbox.DefaultImage {
		rc.Base = ""
	}
	if base != "" && !sandbox.ValidImageName(base) {
		return nil, nil, usagef("--base %q is not an image name (an image of the daemon's: cellvm image ls)", clipArg(base))
	}
	var pkgs []string
	for _, v := range apt {
		pkgs = append(pkgs, strings.Fields(v)...)
	}
	if mirror != "" && len(pkgs) == 0 {
		return nil, nil, usagef("--mirror without --apt: nothing to install from it")
	}
	if len(pkgs) > 0 {
		rc.Steps = append(rc.Steps, sandbox.RecipeStep{Apt: pkgs, Mirror: mirror})
	}
	var inputs []recipe.ArchiveFile
	if wheels != "" || requirements != "" || index != "" {
		if wheels == "" && requirements == "" {
			return nil, nil, usagef("--pip-index without --requirements: nothing to install from it")
		}
		st := sandbox.RecipeStep{PipIndex: index}
		if wheels != "" {
			if err := wantDir("--pip-wheels", wheels); err != nil {
				return nil, nil, err
			}
			st.PipWheels = archiveWheels
			inputs = append(inputs, recipe.ArchiveFile{Src: wheels, Dst: archiveWheels})
		}
		if requirements != "" {
			if info, err := os.Stat(requirements); err != nil || !info.Mode().IsRegular() {
				return nil, nil, usagef("--requirements %s: want a requirements file (%v)", clipArg(requirements), statErr(err))
			}
			st.Requirements = archiveRequirements
			inputs = append(inputs, recipe.ArchiveFile{Src: requirements, Dst: archiveRequirements})
		}
		rc.Steps = append(rc.Steps, st)
	}
	if files != "" {
		if err := wantDir("--files", files); err != nil {
			return nil, nil, err
		}
		rc.Steps = append(rc.Steps, sandbox.RecipeStep{CopyFrom: archiveFiles, CopyTo: "/"})
		inputs = append(inputs, recipe.ArchiveFile{Src: files, Dst: archiveFiles})
	}
	if len(rc.Steps) == 0 {
		return nil, nil, usagef("nothing to build: give --apt, --pip-wheels or --requirements, --files, or -f DOCKERFILE")
	}
	return rc, inputs, nil
}

func wantDir(flag, p string) error {
	info, err := os.Stat(p)
	if err != nil || !info.IsDir() {
		return usagef("%s %s: want a directory (%v)", flag, clipArg(p), statErr(err))
	}
	return nil
}

func statErr(err error) string {
	if err == nil {
		return "not one"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// dockerfileRecipe reads a Dockerfile: its directory is the build
// context. Ignored instructions are noted on stderr.
func (a *app) dockerfileRecipe(path string) (*sandbox.ImageRecipe, []recipe.ArchiveFile, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, "", usageError{fmt.Errorf("-f: %w", err)}
	}
	defer f.Close()
	ctxDir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, nil, "", usageError{err}
	}
	d, err := recipe.Parse(f, ctxDir)
	if err != nil {
		return nil, nil, "", usageError{fmt.Errorf("%s: %w", clipArg(path), err)}
	}
	if err := d.ResolveDirs(); err != nil {
		return nil, nil, "", usageError{err}
	}
	for _, n := range d.Notices {
		fmt.Fprintf(a.stderr, "cellvm image build: %s\n", n)
	}
	return &d.Recipe, d.Files, ctxDir, nil
}
