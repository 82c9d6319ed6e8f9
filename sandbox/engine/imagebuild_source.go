package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
)

// prepared is a build's plan and what its inputs disk is made of.
type prepared struct {
	plan buildplan.Plan
	// rec is the record the install completes.
	rec store.Record
	// basePath is a recipe's base image file (the out disk's start).
	basePath string
	// spool is a recipe's inputs (a tar of inputs/...), read from the
	// start; openLayer streams an OCI image's layers.
	spool     *os.File
	openLayer func(i int) (io.ReadCloser, error)
	// inputBytes is about what the inputs disk will take.
	inputBytes int64
	fetched    *FetchedImage
}

func (p *prepared) close() {
	if p.spool != nil {
		p.spool.Close()
	}
	p.fetched.close()
	p.fetched = nil
}

// prepare reads the request's source into a plan.
func (b *imageBuild) prepare(ctx context.Context) (*prepared, error) {
	p := &prepared{plan: buildplan.Plan{Version: buildplan.Version, Name: b.req.Name, Collect: collectFile, Modules: modulesFile}}
	p.rec = store.Record{Name: b.req.Name, Tenant: b.tenant, Source: b.source()}
	var err error
	if b.req.Recipe != nil {
		err = b.prepareRecipe(p)
	} else {
		err = b.prepareOCI(ctx, p)
	}
	if err != nil {
		p.close()
		return nil, err
	}
	p.plan.UUID = buildplan.UUIDOf(p.plan.Key)
	p.rec.Key = p.plan.Key
	if err := p.plan.Validate(); err != nil {
		p.close()
		return nil, fmt.Errorf("%w: image %s: %v", sandbox.ErrInvalid, b.req.Name, err)
	}
	return p, nil
}

// prepareOCI fetches a pull's or reads an import's image: its manifest
// and config now, its layers later, streamed into the inputs disk.
func (b *imageBuild) prepareOCI(ctx context.Context, p *prepared) error {
	fetch := b.opt.Fetch
	if fetch == nil {
		return fmt.Errorf("%w: this daemon pulls and imports no OCI images (it was built without a registry client)", sandbox.ErrNotSupported)
	}
	c, hasCaller := sandbox.CallerFrom(ctx)
	opt := FetchOptions{Platform: b.req.Platform, Insecure: b.req.Insecure, Token: b.req.RegistryToken, MaxBytes: b.opt.MaxMiB << 20, TempDir: b.work, Progress: b.progress,
		Operator: !hasCaller || c.Operator}
	var img *FetchedImage
	var err error
	if b.req.Pull != "" {
		b.event(sandbox.ImageEvent{Step: sandbox.ImageStepFetch, Message: "fetching " + clip(b.req.Pull, 256)})
		img, err = fetch.Pull(ctx, b.req.Pull, opt)
	} else {
		b.event(sandbox.ImageEvent{Step: sandbox.ImageStepRead, Message: "reading the archive"})
		img, err = fetch.Import(ctx, b.req.Archive, opt)
	}
	if err != nil {
		return err
	}
	p.fetched = img
	if err := b.checkFetched(img); err != nil {
		return err
	}
	p.plan.Mode, p.plan.DiskBytes, p.plan.Config = buildplan.ModeLayers, b.opt.DiskMiB<<20, img.Config
	p.plan.Key = ociKey(b.entry, img.Digest)
	p.plan.Layers = make([]buildplan.Layer, len(img.Layers))
	for i, l := range img.Layers {
		l.File = layerFile(i)
		p.plan.Layers[i] = l
		p.inputBytes += l.Size
	}
	p.openLayer = img.Open
	p.rec.Ref, p.rec.Digest = img.Ref, img.Digest
	if p.rec.Ref == "" {
		p.rec.Ref = b.req.Pull
	}
	return nil
}

// checkFetched checks what the fetcher said (its bounds are the
// engine's, whatever the fetcher checked).
func (b *imageBuild) checkFetched(img *FetchedImage) error {
	what := "image " + b.req.Name
	if !strings.HasPrefix(img.Digest, "sha256:") || len(img.Digest) != len("sha256:")+64 {
		return fmt.Errorf("%w: %s: the manifest's digest %q is not sha256:HEX", sandbox.ErrUpstream, what, clip(img.Digest, 80))
	}
	if len(img.Layers) == 0 || len(img.Layers) > buildplan.MaxLayers {
		return fmt.Errorf("%w: %s: the OCI image has %d layers (1 to %d)", sandbox.ErrInvalid, what, len(img.Layers), buildplan.MaxLayers)
	}
	if img.Open == nil {
		return fmt.Errorf("%s: the fetcher gave no way to read the layers", what)
	}
	var total int64
	for i, l := range img.Layers {
		if l.Size < 0 || l.Size > b.opt.MaxMiB<<20-total {
			return fmt.Errorf("%w: %s: its layers pass the cap of %d MiB at layer %d (serve --max-image-mib)", sandbox.ErrTooLarge, what, b.opt.MaxMiB, i+1)
		}
		total += l.Size
		if l.MediaType == "" || len(l.MediaType) > 256 || len(l.Digest) > 256 {
			return fmt.Errorf("%w: %s: layer %d has no media type, or one or a digest too long", sandbox.ErrInvalid, what, i+1)
		}
	}
	if err := checkImageConfig(img.Config); err != nil {
		return fmt.Errorf("%s: the OCI image's config: %w", what, err)
	}
	return nil
}

// checkImageConfig checks an image's config (Env, WorkingDir, User).
func checkImageConfig(c buildplan.Config) error {
	if err := sandbox.CheckImageEnv(c.Env); err != nil {
		return err
	}
	if c.WorkingDir != "" && (!strings.HasPrefix(c.WorkingDir, "/") || len(c.WorkingDir) > 1024 || strings.ContainsAny(c.WorkingDir, "\x00\n")) {
		return fmt.Errorf("%w: working dir %q is not an absolute path", sandbox.ErrInvalid, clip(c.WorkingDir, 64))
	}
	if c.User != "" && !sandbox.ValidImageUser(c.User) {
		return fmt.Errorf("%w: user %q is not a name or uid, optionally :group", sandbox.ErrInvalid, clip(c.User, 64))
	}
	return nil
}

// prepareRecipe reads a recipe's base and archive.
func (b *imageBuild) prepareRecipe(p *prepared) error {
	rc := b.req.Recipe
	base := rc.Base
	if isDefaultImage(base) {
		base = sandbox.DefaultImage
	}
	baseEntry, err := b.m.imageEntry(b.tenant, base)
	if err != nil {
		return fmt.Errorf("image %s: base: %w", b.req.Name, err)
	}
	if baseEntry == b.entry {
		return fmt.Errorf("%w: image %s cannot be its own base", sandbox.ErrInvalid, b.req.Name)
	}
	if p.basePath, err = b.m.entryPath(baseEntry); err != nil {
		return err
	}
	fi, err := os.Stat(p.basePath)
	if err != nil {
		return fmt.Errorf("image %s: base image %s: %w", b.req.Name, base, err)
	}
	baseUUID, err := store.FSUUID(p.basePath)
	if err != nil {
		return fmt.Errorf("image %s: base image %s: %w", b.req.Name, base, err)
	}
	if baseEntry != "" {
		if rec, err := store.ReadRecord(filepath.Dir(p.basePath)); err == nil {
			p.plan.Config = rec.Config
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("image %s: base image %s's record: %w", b.req.Name, base, err)
		}
	}
	// The out disk: room to grow, within the cap; the builder shrinks it.
	disk := max(2*fi.Size(), fi.Size()+2<<30)
	if limit := b.opt.DiskMiB << 20; disk > limit {
		disk = limit
	}
	if disk < fi.Size()+64<<20 {
		return fmt.Errorf("%w: image %s: its base %s is %d MiB, which leaves no room under the cap of %d MiB (serve --image-build-disk-mib)", sandbox.ErrTooLarge, b.req.Name, base, fi.Size()>>20, b.opt.DiskMiB)
	}
	if p.spool, err = os.CreateTemp(b.work, "spool-*.tar"); err != nil {
		return fmt.Errorf("image %s: spool: %w", b.req.Name, err)
	}
	b.event(sandbox.ImageEvent{Step: sandbox.ImageStepRead, Message: "reading the recipe's inputs"})
	in, err := readRecipeArchive(b.req.Archive, p.spool, b.opt.MaxArchiveMiB<<20)
	if err != nil {
		return err
	}
	if err := in.checkSteps(rc.Steps); err != nil {
		return err
	}
	if _, err := p.spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	p.inputBytes = in.bytes + 1<<20
	p.plan.Mode, p.plan.DiskBytes, p.plan.Base, p.plan.Steps = buildplan.ModeDerive, disk, base, rc.Steps
	p.plan.Key = recipeKey(b.entry, baseUUID, fi.Size(), rc.Steps, in.digest)
	p.rec.Base, p.rec.BaseUUID, p.rec.Steps = base, baseUUID, len(rc.Steps)
	for _, s := range rc.Steps {
		if len(p.rec.Apt)+len(s.Apt) <= 1024 {
			p.rec.Apt = append(p.rec.Apt, s.Apt...)
		}
	}
	return nil
}
