package build

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// Exit codes of Main.
const (
	ExitOK     = 0
	ExitFailed = 1 // a step failed: "failed: STEP" and the error were printed
	ExitUsage  = 2
)

// Options are the builder's devices and directories (the buildplan
// constants in the VM; files in tests).
type Options struct {
	// Inputs is the inputs archive (a device or a tar file).
	Inputs string
	// Out is the out disk (a block device, or a file mounted through a
	// loop device).
	Out string
	// Work is the builder's directory: progress, result.json, the small
	// inputs (in/), the image's mount point (root/).
	Work string
	// MaxInputs bounds the small inputs' bytes (DefaultMaxInputs when 0).
	MaxInputs int64
}

// Main is `cellvm-init build [-inputs DEV] [-out DEV] [-work DIR]`.
func Main(args []string) int {
	fs := flag.NewFlagSet(buildplan.BuildArg, flag.ContinueOnError)
	o := Options{}
	fs.StringVar(&o.Inputs, "inputs", buildplan.InputsDisk, "the inputs archive (tar): the plan first")
	fs.StringVar(&o.Out, "out", buildplan.OutDisk, "the out disk (block device or file)")
	fs.StringVar(&o.Work, "work", buildplan.WorkDir, "the builder's work directory")
	fs.Int64Var(&o.MaxInputs, "max-inputs", DefaultMaxInputs, "bound on the small inputs' bytes (kept in memory)")
	if err := fs.Parse(args); err != nil {
		return ExitUsage
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "build: unexpected arguments %q\n", fs.Args())
		return ExitUsage
	}
	// A reader of stdout that goes away must not end the build: the
	// progress file still has every line.
	signal.Ignore(syscall.SIGPIPE)
	return Build(o, os.Stdout)
}

// builder is one build's state.
type builder struct {
	o      Options
	p      *progress
	plan   buildplan.Plan
	config buildplan.Config

	inDir  string // the small inputs
	inputs *Root
	mnt    string // the image's mount point
	m      *mounted
	root   *Root // the image

	resolvLink    string // the image's resolv.conf link, put back at the end
	madeInputsDir bool
	baseKey       string // the base's marker key
	featured      bool   // the base features modules (strict collect.py)
	python        string
	languages     []cell.LanguageInfo
	manifest      []byte
}

// Build runs a build; its progress lines go to stdout and the progress
// file. It returns the exit code.
func Build(o Options, stdout io.Writer) int {
	if o.MaxInputs <= 0 {
		o.MaxInputs = DefaultMaxInputs
	}
	if err := os.MkdirAll(o.Work, 0o755); err != nil {
		fmt.Fprintf(stdout, "%s%s\nthe work directory: %v\n", buildplan.FailedPrefix, sandbox.ImageStepExtract, err)
		return ExitFailed
	}
	p, err := openProgress(stdout, filepath.Join(o.Work, filepath.Base(buildplan.ProgressFile)))
	if err != nil {
		fmt.Fprintf(stdout, "%s%s\n%v\n", buildplan.FailedPrefix, sandbox.ImageStepExtract, err)
		return ExitFailed
	}
	defer p.close()
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	b := &builder{o: o, p: p, inDir: filepath.Join(o.Work, "in"), mnt: filepath.Join(o.Work, "root")}
	defer b.close()

	p.Step(sandbox.ImageStepExtract)
	if err := b.extract(); err != nil {
		return b.fail(sandbox.ImageStepExtract, err)
	}
	for i, s := range b.plan.Steps {
		kind := s.Kind()
		name := stepName(kind)
		if kind != "config" {
			p.Step(name)
		}
		if err := b.runStep(s); err != nil {
			return b.fail(name, fmt.Errorf("step %d (%s): %w", i+1, kind, err))
		}
	}
	p.Step(sandbox.ImageStepManifest)
	if err := b.manifestStep(); err != nil {
		return b.fail(sandbox.ImageStepManifest, err)
	}
	p.Step(sandbox.ImageStepMkfs)
	if err := b.finish(); err != nil {
		return b.fail(sandbox.ImageStepMkfs, err)
	}
	p.Step(sandbox.ImageStepDone)
	return ExitOK
}

func (b *builder) fail(step string, err error) int {
	b.p.Failed(step, err)
	return ExitFailed
}

// close undoes what a failed build left: the image's mount, descriptors.
func (b *builder) close() {
	if b.root != nil {
		b.root.Close()
	}
	if b.inputs != nil {
		b.inputs.Close()
	}
	if b.m != nil {
		if err := b.m.unmount(); err != nil {
			b.p.Printf("%v", err)
		}
	}
}

// extract reads the plan and the small inputs, prepares and mounts the
// out disk, and applies the layers.
func (b *builder) extract() error {
	if os.Geteuid() != 0 {
		return errors.New("the builder runs as root (it makes file systems, mounts and chroots)")
	}
	in, err := openInputs(b.o.Inputs)
	if err != nil {
		return err
	}
	defer in.close()
	if b.plan, err = in.readPlan(); err != nil {
		return err
	}
	b.config = b.plan.Config
	b.p.Printf("image %s: %s, %d layers, %d steps", b.plan.Name, b.plan.Mode, len(b.plan.Layers), len(b.plan.Steps))
	os.RemoveAll(b.inDir)
	if err := os.Mkdir(b.inDir, 0o755); err != nil {
		return fmt.Errorf("the inputs directory: %w", err)
	}
	if b.inputs, err = OpenRoot(b.inDir); err != nil {
		return err
	}
	ai := &Applier{Root: b.inputs, Inputs: true, MaxBytes: b.o.MaxInputs}
	if err := in.readSmall(&b.plan, ai); err != nil {
		return err
	}
	for _, f := range []string{b.plan.Collect, b.plan.Modules} {
		fd, err := b.inputs.openat2(f, unix.O_PATH)
		if err != nil {
			return fmt.Errorf("the inputs archive lacks %s", f)
		}
		unix.Close(fd)
	}
	switch b.plan.Mode {
	case buildplan.ModeDerive:
		err = prepareDerive(b.p, b.o.Out, b.plan.UUID)
	default:
		err = prepareLayers(b.p, b.o.Out, b.plan.UUID)
	}
	if err != nil {
		return err
	}
	if b.m, err = mountOut(b.o.Out, b.mnt); err != nil {
		return err
	}
	if b.root, err = OpenRoot(b.mnt); err != nil {
		return err
	}
	a := &Applier{Root: b.root, MaxBytes: b.plan.DiskBytes, Warn: func(s string) { b.p.Printf("%s", s) }}
	if err := in.applyLayers(&b.plan, a, b.p); err != nil {
		return err
	}
	if len(b.plan.Layers) > 0 {
		b.p.Printf("layers: %.1f MiB of files", float64(a.Written())/(1<<20))
	}
	return b.prepareImage()
}

// finish unmounts, checks and shrinks the image and writes the result.
func (b *builder) finish() error {
	unix.Syncfs(b.root.fd)
	b.root.Close()
	b.root = nil
	if err := b.m.unmount(); err != nil {
		return err
	}
	b.m = nil
	size, err := finalize(b.p, b.o.Out, b.plan.UUID)
	if err != nil {
		return err
	}
	data, err := b.result(size)
	if err != nil {
		return err
	}
	res := filepath.Join(b.o.Work, filepath.Base(buildplan.ResultFile))
	if err := os.WriteFile(res+".tmp", data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(res+".tmp", res); err != nil {
		return err
	}
	b.p.Printf("image: %.1f MiB", float64(size)/(1<<20))
	b.inputs.Close()
	b.inputs = nil
	os.RemoveAll(b.inDir)
	return nil
}
