package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
)

// Images are made in a builder microVM, never on the host. CreateImage
// gathers the inputs on the host (an OCI image's layers from a registry
// or an archive, checked against their digests and sizes by the fetcher;
// or a recipe's base image and archive of inputs), writes them into one
// tar archive, the inputs disk, with the plan first (package
// image/buildplan), and makes the out disk: a copy of the recipe's base,
// or a blank sparse file for layers. It then boots an internal VM of the
// default image, cold and as root, with those two disks (vdb read-only,
// vdc writable, both passed open to the jailed VMM), runs the guest's
// builder (`/proc/1/exe build`) under the request's deadline, reads its
// progress and result, and checks the out file by its ext4 superblock
// alone (its UUID is the plan's, its size the builder's word and within
// the file). The image is then put in place in one rename.
//
// The host never mounts, unpacks, chroots into or runs anything of an
// image, and holds no loop device: the guest wrote every byte of the out
// disk, so it is hostile input, read only through the bounded superblock
// reader of package image/store. Every failure removes the VM, the work
// directory (inputs, out file) and leaves the image there was as it was.
//
// Names are per tenant as workspaces' are (store.Entry): a tenant's image
// NAME is the store's TENANT~NAME, the default tenant's and the
// operator's are NAME, shared with every tenant. One build (or delete) of
// an entry runs at a time.
//
// Where things are: imagebuild_opts.go (options, the fetcher interface),
// imagebuild_source.go (the three sources into a plan), imagebuild_archive.go
// (a recipe's archive), imagebuild_inputs.go (the inputs disk),
// imagebuild_key.go (cache keys), imagebuild_vm.go (the builder VM,
// progress, the result), imagebuild_net.go (its network), and
// imagebuild_install.go (the check and the install).

// imageBuild is one CreateImage.
type imageBuild struct {
	m        *VMManager
	req      sandbox.ImageRequest
	opt      ImageBuildOptions
	tenant   string // "" for the default tenant
	entry    string // store.Entry(tenant, req.Name)
	work     string // the work directory, under the images directory
	taken    bool   // an image of the entry is there (req.Replace)
	start    time.Time
	deadline time.Time
	progress func(sandbox.ImageEvent)
}

// CreateImage implements Manager.
func (m *VMManager) CreateImage(ctx context.Context, req sandbox.ImageRequest, progress func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	if err := req.Validate(); err != nil {
		return sandbox.ImageInfo{}, err
	}
	if progress == nil {
		progress = func(sandbox.ImageEvent) {}
	}
	timeout := req.Timeout
	if timeout == 0 {
		timeout = sandbox.DefaultImageBuildTimeout
	}
	b := &imageBuild{m: m, req: req, opt: m.opt.ImageBuild.withDefaults(), start: time.Now(), progress: progress}
	if t := sandbox.Owner(req.Tenant); t != sandbox.DefaultTenant {
		b.tenant = t
	}
	b.entry = store.Entry(b.tenant, req.Name)
	b.deadline = b.start.Add(timeout)
	ctx, cancel := context.WithDeadline(ctx, b.deadline)
	defer cancel()

	unlock, err := m.lockImage(b.entry)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	defer unlock()
	st := m.images()
	if _, b.taken = st.ImagePath(b.entry); b.taken && !req.Replace {
		return sandbox.ImageInfo{}, fmt.Errorf("%w: image %s exists; ask to replace it (replace: true, or --replace), or delete it first", sandbox.ErrBusy, req.Name)
	}
	if err := os.MkdirAll(st.Dir, 0o755); err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("images directory: %w", err)
	}
	if b.work, err = os.MkdirTemp(st.Dir, buildWorkPrefix+b.entry+"-"); err != nil {
		return sandbox.ImageInfo{}, fmt.Errorf("image %s: work directory: %w", req.Name, err)
	}
	defer os.RemoveAll(b.work)
	log := m.log.With("image", req.Name, "tenant", sandbox.Owner(b.tenant), "source", b.source())
	log.Info("image build started")
	info, err := b.run(ctx)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			err = deadlineErr(err, timeout)
		}
		log.Warn("image build failed; the image there was is unchanged", "error", clip(err.Error(), 4096), "took_s", time.Since(b.start).Seconds())
		return sandbox.ImageInfo{}, err
	}
	log.Info("image ready", "key", info.Key, "digest", info.Digest, "size_bytes", info.SizeBytes, "took_s", time.Since(b.start).Seconds())
	progress(sandbox.ImageEvent{Step: sandbox.ImageStepDone})
	return info, nil
}

// deadlineErr says that err came of the request's deadline.
func deadlineErr(err error, timeout time.Duration) error {
	var se *sandbox.ImageStepError
	if errors.As(err, &se) {
		return &sandbox.ImageStepError{Step: se.Step, Tail: se.Tail,
			Err: fmt.Errorf("%w: the image was not made within its deadline of %v (ask for a longer timeout): %v", sandbox.ErrBuildFailed, timeout, se.Err)}
	}
	return fmt.Errorf("the image was not made within its deadline of %v (ask for a longer timeout): %w", timeout, err)
}

func (b *imageBuild) source() string {
	switch {
	case b.req.Pull != "":
		return sandbox.ImageSourcePull
	case b.req.Import:
		return sandbox.ImageSourceImport
	}
	return sandbox.ImageSourceBuild
}

func (b *imageBuild) event(ev sandbox.ImageEvent) { b.progress(ev) }

// run makes the image: the plan and its inputs, the out disk, the
// builder VM, the check and the install.
func (b *imageBuild) run(ctx context.Context) (sandbox.ImageInfo, error) {
	p, err := b.prepare(ctx)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	defer p.close()
	if b.taken {
		if rec, err := store.ReadRecord(b.m.images().ImageDir(b.entry)); err == nil && rec.Key == p.plan.Key {
			b.event(sandbox.ImageEvent{Step: sandbox.ImageStepDone, Message: fmt.Sprintf("image %s is up to date: made %s from the same inputs", b.req.Name, rec.BuiltAt.Format(time.RFC3339))})
			return b.m.imageInfo(b.entry, b.req.Name, b.tenant, 0), nil
		}
	}
	if err := b.checkFreeSpace(p); err != nil {
		return sandbox.ImageInfo{}, err
	}
	inputs := filepath.Join(b.work, "inputs.tar")
	if err := b.writeInputsFile(ctx, p, inputs); err != nil {
		return sandbox.ImageInfo{}, err
	}
	p.close() // the layers are in the inputs file
	imgDir := filepath.Join(b.work, "image")
	if err := os.Mkdir(imgDir, 0o755); err != nil {
		return sandbox.ImageInfo{}, err
	}
	out := filepath.Join(imgDir, store.ImageFile)
	if err := b.makeOutDisk(p, out); err != nil {
		return sandbox.ImageInfo{}, err
	}
	res, err := b.runBuilder(ctx, &p.plan, inputs, out)
	if err != nil {
		return sandbox.ImageInfo{}, err
	}
	os.Remove(inputs)
	return b.install(p, res, imgDir)
}

// checkFreeSpace refuses a build the images directory's file system
// cannot start: its inputs, the copy of a recipe's base (its allocated
// blocks), and buildHeadroom for what the build writes. The out disk is
// sparse and only what the builder writes takes space, so the check does
// not ask for the whole disk cap: a build that later finds the host's
// disk full fails at its step (the guest sees an I/O error) and leaves
// nothing behind, like any failed build.
func (b *imageBuild) checkFreeSpace(p *prepared) error {
	need := p.inputBytes + buildHeadroom
	if p.basePath != "" {
		var st unix.Stat_t
		if err := unix.Stat(p.basePath, &st); err == nil {
			need += st.Blocks * 512
		}
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(b.work, &fs); err != nil {
		return fmt.Errorf("image %s: free space of %s: %w", b.req.Name, b.work, err)
	}
	if free := int64(fs.Bavail) * int64(fs.Bsize); free < need {
		return fmt.Errorf("%w: image %s needs at least %d MiB on %s to start (its inputs, the copy of its base, and %d MiB to build in), and %d MiB are free; free some space there",
			sandbox.ErrFull, b.req.Name, need>>20, filepath.Dir(b.work), buildHeadroom>>20, free>>20)
	}
	return nil
}

// buildHeadroom is the free space a build needs beyond its inputs and
// its base's copy.
const buildHeadroom = 512 << 20

// writeInputsFile writes the inputs disk.
func (b *imageBuild) writeInputsFile(ctx context.Context, p *prepared, path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("image %s: inputs: %w", b.req.Name, err)
	}
	defer f.Close()
	step := sandbox.ImageStepFetch
	if b.req.Pull == "" {
		step = sandbox.ImageStepRead
	}
	var total int64
	for _, l := range p.plan.Layers {
		total += l.Size
	}
	last := time.Time{}
	src := inputsSource{progress: func(done int64) {
		if now := time.Now(); now.Sub(last) > time.Second || done == total {
			last = now
			b.event(sandbox.ImageEvent{Step: step, Done: done, Total: total})
		}
	}}
	if p.spool != nil {
		src.spool = p.spool
	}
	if p.openLayer != nil {
		src.openLayer = func(i int) (io.ReadCloser, error) {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return p.openLayer(i)
		}
	}
	if err := writeInputs(f, &p.plan, src); err != nil {
		if b.req.Pull != "" && ctx.Err() == nil {
			err = fmt.Errorf("%w: %v", sandbox.ErrUpstream, err)
		}
		return &sandbox.ImageStepError{Step: step, Err: fmt.Errorf("image %s: the inputs: %w", b.req.Name, err)}
	}
	return f.Close()
}

// makeOutDisk makes the out disk: a copy of the base for a recipe (the
// host copies the file; it never reads it), a blank sparse file for
// layers; DiskBytes long either way.
func (b *imageBuild) makeOutDisk(p *prepared, out string) error {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("image %s: out disk: %w", b.req.Name, err)
	}
	defer f.Close()
	if p.basePath != "" {
		b.event(sandbox.ImageEvent{Step: sandbox.ImageStepExtract, Message: "copying the base image " + p.plan.Base})
		if err := copyFile(f, p.basePath); err != nil {
			return fmt.Errorf("image %s: copying the base image: %w", b.req.Name, err)
		}
	}
	if err := f.Truncate(p.plan.DiskBytes); err != nil {
		return fmt.Errorf("image %s: out disk of %d MiB: %w", b.req.Name, p.plan.DiskBytes>>20, err)
	}
	return f.Close()
}

// copyFile copies src into dst: a reflink where the file system makes
// one (FICLONE), else copy_file_range (io.Copy between files).
func copyFile(dst *os.File, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if unix.IoctlFileClone(int(dst.Fd()), int(in.Fd())) == nil {
		return nil
	}
	_, err = io.Copy(dst, in)
	return err
}

// buildWorkPrefix starts the name of a build's work directory in the
// images directory (hidden: never an image's entry).
const buildWorkPrefix = ".build-"

// lockImage holds entry for one build or delete at a time, or is ErrBusy.
func (m *VMManager) lockImage(entry string) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.imageLocks == nil {
		m.imageLocks = map[string]bool{}
	}
	if m.imageLocks[entry] {
		_, name, _ := store.ParseEntry(entry)
		return nil, fmt.Errorf("%w: image %s is being made or deleted; try again after", sandbox.ErrBusy, name)
	}
	m.imageLocks[entry] = true
	return func() {
		m.mu.Lock()
		delete(m.imageLocks, entry)
		m.mu.Unlock()
	}, nil
}

// imageBuildDir holds the builder VMs' directories.
func (m *VMManager) imageBuildDir() string { return filepath.Join(m.opt.StateDir, "imagebuilds") }

func (m *VMManager) imageBuildVMDir(id string) string { return filepath.Join(m.imageBuildDir(), id) }

// sweepImageBuilds removes what builds an earlier daemon left: their VMs
// (stopped, their cgroups removed) and work directories.
func (m *VMManager) sweepImageBuilds() {
	// The store is made here, with the daemon, not by its first build:
	// a request that fails leaves the state directory as it found it.
	for _, dir := range []string{m.images().Dir, m.imageBuildDir()} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			m.log.Warn("image directory", "dir", dir, "error", err)
		}
	}
	vms, _ := os.ReadDir(m.imageBuildDir())
	for _, e := range vms {
		p := filepath.Join(m.imageBuildDir(), e.Name())
		m.log.Warn("removing an image build's VM an earlier daemon left", "dir", p)
		stopLeftVM(p)
		os.RemoveAll(p)
	}
	ents, _ := os.ReadDir(m.images().Dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), buildWorkPrefix) || strings.HasPrefix(e.Name(), ".rm-") {
			p := filepath.Join(m.images().Dir, e.Name())
			m.log.Warn("removing an image build's work an earlier daemon left", "dir", p)
			os.RemoveAll(p)
		}
	}
}
