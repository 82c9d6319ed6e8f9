package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
)

// Images are the root file systems sandboxes boot. The default one is the
// daemon's own (Options.RootFS, with its manifest beside it); the others
// lie under StateDir/images/NAME/, each a read-only rootfs.ext4 and the
// manifest.json its build recorded, put there by an image build. A
// sandbox names its image in Config.Image; a fork keeps its snapshot's,
// since its memory holds the page cache of that image's files. Templates
// are per image (and shape), built for an image after its first create.
// An image is removed only while no sandbox or snapshot uses it.

// images is the image store the daemon boots from (package image/store).
func (m *VMManager) images() store.Store {
	if m.opt.ImagesDir != "" {
		return store.Store{Dir: m.opt.ImagesDir}
	}
	return store.Store{Dir: filepath.Join(m.opt.StateDir, "images")}
}

// isDefaultImage reports whether name is the daemon's own image.
func isDefaultImage(name string) bool { return name == "" || name == sandbox.DefaultImage }

// imageEntry resolves image name, as tenant's sandbox names it, to its
// entry in the store (store.Entry): the tenant's own image of that name
// first, then the shared one (the default tenant's or the operator's).
// "" is the default image. An entry with a '~' is taken as it is: only
// the engine's own callers (templates) pass one, since a caller's name
// cannot hold a '~'.
func (m *VMManager) imageEntry(tenant, name string) (string, error) {
	if isDefaultImage(name) {
		return "", nil
	}
	st := m.images()
	if strings.Contains(name, "~") {
		if _, ok := st.ImagePath(name); ok {
			return name, nil
		}
	} else if sandbox.ValidImageName(name) {
		if own := store.Entry(tenant, name); own != name {
			if _, ok := st.ImagePath(own); ok {
				return own, nil
			}
		}
		if _, ok := st.ImagePath(name); ok {
			return name, nil
		}
	}
	return "", fmt.Errorf("%w: no image %q; the images here are %s", sandbox.ErrInvalid, clip(name, 64), strings.Join(m.imageNames(tenant), ", "))
}

// imagePath is the root image file of image name as tenant's sandbox
// names it (imageEntry), or ErrInvalid naming the images there are.
func (m *VMManager) imagePath(tenant, name string) (string, error) {
	entry, err := m.imageEntry(tenant, name)
	if err != nil {
		return "", err
	}
	return m.entryPath(entry)
}

// entryPath is the root image file of a store entry ("": the default).
func (m *VMManager) entryPath(entry string) (string, error) {
	if entry == "" {
		return m.opt.RootFS, nil
	}
	if p, ok := m.images().ImagePath(entry); ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: image %q is gone", sandbox.ErrInvalid, clip(entry, 64))
}

// imageNames lists the images tenant sees: the default first, then the
// shared ones and the tenant's own by name.
func (m *VMManager) imageNames(tenant string) []string {
	names := []string{sandbox.DefaultImage}
	own := sandbox.Owner(tenant)
	for _, im := range m.images().Images() {
		if im.Tenant == "" || im.Tenant == own {
			names = append(names, im.Name)
		}
	}
	return names
}

// sandboxImage is the store entry of the image s booted.
func (m *VMManager) sandboxImage(s *vmSandbox) string {
	if s.imageEntry != "" || isDefaultImage(s.cfg.Image) {
		return s.imageEntry
	}
	e, _ := m.imageEntry(s.cfg.Tenant, s.cfg.Image)
	return e
}

// Images implements Manager: the default image, then the store's, each
// with its tenant ("" for a shared one; the tenant wrapper shows a
// tenant the shared ones and its own).
func (m *VMManager) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	m.mu.Lock()
	ss := make([]*vmSandbox, 0, len(m.sandboxes))
	for _, s := range m.sandboxes {
		if !s.internal {
			ss = append(ss, s)
		}
	}
	m.mu.Unlock()
	users := map[string]int{}
	for _, s := range ss {
		users[m.sandboxImage(s)]++
	}
	out := []sandbox.ImageInfo{m.imageInfo("", sandbox.DefaultImage, "", users[""])}
	for _, im := range m.images().Images() {
		if info := m.imageInfo(im.Entry, im.Name, im.Tenant, users[im.Entry]); info.Name != "" {
			out = append(out, info)
		}
	}
	return out, nil
}

// imageInfo describes the image at entry ("": the default); its Name is
// "" when it went meanwhile.
func (m *VMManager) imageInfo(entry, name, tenant string, users int) sandbox.ImageInfo {
	path, err := m.entryPath(entry)
	if err != nil {
		return sandbox.ImageInfo{}
	}
	fi, err := os.Stat(path)
	if err != nil {
		return sandbox.ImageInfo{}
	}
	info := sandbox.ImageInfo{Name: name, Tenant: tenant, SizeBytes: fi.Size(), BuiltAt: fi.ModTime().UTC(), Sandboxes: users}
	mf := filepath.Join(filepath.Dir(path), store.ManifestFile)
	if entry == "" {
		mf = filepath.Join(filepath.Dir(path), manifest.BuildFile)
	}
	if b, err := readBounded(mf, maxManifestBytes); err == nil {
		if man, err := manifest.Parse(b); err == nil {
			info.Python, info.Languages = man.Python, man.Languages
			for _, mod := range man.Modules {
				info.Modules = append(info.Modules, mod.Distribution+" "+mod.Version)
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("image manifest", "image", name, "tenant", tenant, "error", err)
	}
	if entry != "" {
		if rec, err := store.ReadRecord(filepath.Dir(path)); err == nil {
			info.Key, info.Apt, info.BuildSeconds = rec.Key, rec.Apt, rec.Seconds
			info.Source, info.Ref, info.Digest, info.Base = rec.Source, rec.Ref, rec.Digest, rec.Base
			info.Env, info.WorkingDir, info.User = rec.Config.Env, rec.Config.WorkingDir, rec.Config.User
			if rec.Python != "" && info.Python == "" {
				info.Python = rec.Python
			}
			// The builder's languages are what the image runs; its
			// manifest's (collect.py's, where python3 ran it) name
			// the same, or none in an image without python3.
			if len(rec.Languages) > 0 {
				info.Languages = rec.Languages
			}
			if !rec.BuiltAt.IsZero() {
				info.BuiltAt = rec.BuiltAt
			}
		}
	}
	return info
}

// maxManifestBytes bounds an image's manifest.json as the host reads it.
const maxManifestBytes = 8 << 20

// readBounded reads a file of at most max bytes.
func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, err
}

// imageUUID is an image file's ext4 UUID, "" when it has none to read.
func imageUUID(path string) string {
	u, err := store.FSUUID(path)
	if err != nil {
		return ""
	}
	return u
}

// sameImage says whether image name is still the image a machine booted
// with UUID booted (by its ext4 UUID; unknown on either side passes), and
// if not, why not, for what's error.
func (m *VMManager) sameImage(tenant, name, booted, what string) error {
	path, err := m.imagePath(tenant, name)
	if err != nil {
		return err
	}
	if now := imageUUID(path); booted != "" && now != "" && now != booted {
		if isDefaultImage(name) {
			name = sandbox.DefaultImage
		}
		return fmt.Errorf("%w: %s: image %s was rebuilt since (ext4 %s then, %s now), and its memory caches the old image's files; delete it and start anew",
			sandbox.ErrInvalid, what, name, booted, now)
	}
	return nil
}

// DeleteImage implements Manager: it removes image name of the tenant
// ctx's caller acts for (a shared one for the default tenant and the
// operator). An image a sandbox uses (running, paused or lost) or a
// snapshot was taken of is ErrBusy, naming the first user: their memory
// caches its files. The default image is the daemon's own and stays.
func (m *VMManager) DeleteImage(ctx context.Context, name string) error {
	if isDefaultImage(name) {
		return fmt.Errorf("%w: the default image is the daemon's own (serve --rootfs); it is not removed through the API", sandbox.ErrInvalid)
	}
	if !sandbox.ValidImageName(name) {
		return fmt.Errorf("%w: %q is not an image name", sandbox.ErrInvalid, clip(name, 64))
	}
	caller, _ := sandbox.CallerFrom(ctx)
	entry := store.Entry(caller.Tenant, name)
	if _, ok := m.images().ImagePath(entry); !ok {
		return fmt.Errorf("%w: no image %s; the images here are %s", sandbox.ErrNotFound, name, strings.Join(m.imageNames(caller.Tenant), ", "))
	}
	// One build or delete of an entry at a time (imagebuild.go).
	unlock, err := m.lockImage(entry)
	if err != nil {
		return err
	}
	defer unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sandboxes {
		if !s.internal && m.sandboxImage(s) == entry {
			return fmt.Errorf("%w: image %s is used by sandbox %s; delete it first", sandbox.ErrBusy, name, s.id)
		}
	}
	if snaps, err := m.ListSnapshots(ctx); err == nil {
		for _, sn := range snaps {
			if meta, err := m.loadSnapshot(sn.ID); err == nil && !isDefaultImage(meta.Config.Image) {
				if e, _ := m.imageEntry(meta.Config.Tenant, meta.Config.Image); e == entry {
					return fmt.Errorf("%w: image %s is the image of snapshot %s (its forks boot from it); delete the snapshot first", sandbox.ErrBusy, name, sn.ID)
				}
			}
		}
	}
	if err := m.images().Remove(entry, newSnapshotID()[5:]); err != nil {
		return fmt.Errorf("delete image %s: %w", name, err)
	}
	if m.templates != nil {
		m.templates.dropImage(entry)
	}
	m.log.Info("image deleted", "name", name, "tenant", caller.Tenant)
	return nil
}
