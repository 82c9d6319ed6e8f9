package engine

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
)

// pythonRE is a python3 version as the builder reports it.
var pythonRE = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{1,4})?([a-z]{1,5}[0-9]{0,4})?\+?$`)

// install checks the builder's out disk and result and puts the image in
// place: imgDir (holding the out disk) becomes the store's entry in one
// exchange, and the old image there, if any, is removed.
func (b *imageBuild) install(p *prepared, res *buildplan.Result, imgDir string) (sandbox.ImageInfo, error) {
	b.event(sandbox.ImageEvent{Step: sandbox.ImageStepInstall})
	fail := func(err error) (sandbox.ImageInfo, error) {
		return sandbox.ImageInfo{}, &sandbox.ImageStepError{Step: sandbox.ImageStepInstall, Err: fmt.Errorf("%w: image %s: %v", sandbox.ErrBuildFailed, b.req.Name, err)}
	}
	out := filepath.Join(imgDir, store.ImageFile)
	if err := checkOutDisk(out, &p.plan, res); err != nil {
		return fail(err)
	}
	if err := checkImageConfig(res.Config); err != nil {
		return fail(fmt.Errorf("the builder's config: %v", err))
	}
	if res.Python != "" && !pythonRE.MatchString(res.Python) {
		return fail(fmt.Errorf("the builder's python version %q is not one", clip(res.Python, 32)))
	}
	// The builder runs where the image's own steps ran as root: its
	// word on the languages is checked like the rest of its result.
	if err := manifest.CheckLanguages(res.Languages); err != nil {
		return fail(fmt.Errorf("the builder's languages: %v", err))
	}
	rec := p.rec
	rec.Config, rec.Python, rec.Languages = res.Config, res.Python, res.Languages
	rec.BuiltAt, rec.Seconds, rec.SizeBytes = time.Now().UTC(), time.Since(b.start).Seconds(), res.SizeBytes
	if len(res.Manifest) > 0 {
		if man, err := manifest.Parse(res.Manifest); err == nil {
			if mb, err := json.MarshalIndent(man, "", "  "); err == nil {
				if err := os.WriteFile(filepath.Join(imgDir, store.ManifestFile), append(mb, '\n'), 0o444); err != nil {
					return fail(err)
				}
			}
			if rec.Python == "" {
				rec.Python = man.Python
			}
		} else {
			b.m.log.Warn("image build: the builder's manifest does not parse; the image has none", "image", b.req.Name, "error", clip(err.Error(), 256))
		}
	}
	rb, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(imgDir, store.BuildFile), append(rb, '\n'), 0o444); err != nil {
		return fail(err)
	}
	if err := os.Chmod(imgDir, 0o755); err != nil {
		return fail(err)
	}
	dst := b.m.images().ImageDir(b.entry)
	if err := store.Install(imgDir, dst); err != nil {
		return fail(err)
	}
	// imgDir now holds the old image, if there was one: the work
	// directory's removal takes it. A replaced image's templates are
	// stale (their memory caches the old image's files).
	if b.taken && b.m.templates != nil {
		b.m.templates.dropImage(b.entry)
	}
	return b.m.imageInfo(b.entry, b.req.Name, b.tenant, 0), nil
}

// checkOutDisk checks the out disk by its superblock alone (the guest
// wrote it: it is never mounted here), against the plan and the
// builder's word, then cuts it to the file system's size and makes it
// read-only.
func checkOutDisk(path string, plan *buildplan.Plan, res *buildplan.Result) error {
	if res.UUID != plan.UUID {
		return fmt.Errorf("the builder reports UUID %q, not the plan's %s", clip(res.UUID, 64), plan.UUID)
	}
	if res.SizeBytes <= 0 || res.SizeBytes > plan.DiskBytes || res.SizeBytes%1024 != 0 {
		return fmt.Errorf("the builder reports %d bytes, not a size within the disk's %d", res.SizeBytes, plan.DiskBytes)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() > plan.DiskBytes {
		return fmt.Errorf("the out disk is %d bytes, more than the %d it was made", fi.Size(), plan.DiskBytes)
	}
	if err := store.CheckBuilt(f, fi.Size(), plan.UUID, res.SizeBytes); err != nil {
		return err
	}
	if err := f.Truncate(res.SizeBytes); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Chmod(0o444)
}
