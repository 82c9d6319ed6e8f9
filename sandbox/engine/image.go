package engine

import (
	"context"
	"errors"
	"fmt"
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

// imagePath is the root image file of image name, or ErrInvalid naming
// the images there are.
func (m *VMManager) imagePath(name string) (string, error) {
	if isDefaultImage(name) {
		return m.opt.RootFS, nil
	}
	if p, ok := m.images().ImagePath(name); ok {
		return p, nil
	}
	return "", fmt.Errorf("%w: no image %q; the images here are %s", sandbox.ErrInvalid, clip(name, 64), strings.Join(m.imageNames(), ", "))
}

// imageNames lists the images: the default first, then the others by name.
func (m *VMManager) imageNames() []string {
	return append([]string{sandbox.DefaultImage}, m.images().Names()...)
}

// Images implements Manager.
func (m *VMManager) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	m.mu.Lock()
	users := map[string]int{}
	for _, s := range m.sandboxes {
		if !s.internal {
			name := s.cfg.Image
			if isDefaultImage(name) {
				name = sandbox.DefaultImage
			}
			users[name]++
		}
	}
	m.mu.Unlock()
	var out []sandbox.ImageInfo
	for _, name := range m.imageNames() {
		path, err := m.imagePath(name)
		if err != nil {
			continue // removed meanwhile
		}
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		info := sandbox.ImageInfo{Name: name, SizeBytes: fi.Size(), BuiltAt: fi.ModTime().UTC(), Sandboxes: users[name]}
		mf := filepath.Join(filepath.Dir(path), store.ManifestFile)
		if name == sandbox.DefaultImage {
			mf = filepath.Join(filepath.Dir(path), manifest.BuildFile)
		}
		if b, err := os.ReadFile(mf); err == nil {
			if man, err := manifest.Parse(b); err == nil {
				info.Python = man.Python
				for _, mod := range man.Modules {
					info.Modules = append(info.Modules, mod.Distribution+" "+mod.Version)
				}
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("image manifest", "image", name, "error", err)
		}
		if name != sandbox.DefaultImage {
			if rec, err := store.ReadRecord(filepath.Dir(path)); err == nil {
				info.Key, info.Apt, info.BuildSeconds = rec.Key, rec.Apt, rec.Seconds
				if !rec.BuiltAt.IsZero() {
					info.BuiltAt = rec.BuiltAt
				}
			}
		}
		out = append(out, info)
	}
	return out, nil
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
func (m *VMManager) sameImage(name, booted, what string) error {
	path, err := m.imagePath(name)
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

// DeleteImage implements Manager: it removes an image built by `cellvm
// image build`. An image a sandbox uses (running, paused or lost) or a
// snapshot was taken of is ErrBusy, naming the first user: their memory
// caches its files. The default image is the daemon's own and stays.
func (m *VMManager) DeleteImage(ctx context.Context, name string) error {
	if isDefaultImage(name) {
		return fmt.Errorf("%w: the default image is the daemon's own (serve --rootfs); it is not removed through the API", sandbox.ErrInvalid)
	}
	if !sandbox.ValidImageName(name) {
		return fmt.Errorf("%w: %q is not an image name", sandbox.ErrInvalid, clip(name, 64))
	}
	if _, ok := m.images().ImagePath(name); !ok {
		return fmt.Errorf("%w: no image %s; the images here are %s", sandbox.ErrNotFound, name, strings.Join(m.imageNames(), ", "))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.sandboxes {
		if !s.internal && s.cfg.Image == name {
			return fmt.Errorf("%w: image %s is used by sandbox %s; delete it first", sandbox.ErrBusy, name, s.id)
		}
	}
	if snaps, err := m.ListSnapshots(ctx); err == nil {
		for _, sn := range snaps {
			if meta, err := m.loadSnapshot(sn.ID); err == nil && meta.Config.Image == name {
				return fmt.Errorf("%w: image %s is the image of snapshot %s (its forks boot from it); delete the snapshot first", sandbox.ErrBusy, name, sn.ID)
			}
		}
	}
	if err := m.images().Remove(name, newSnapshotID()[5:]); err != nil {
		return fmt.Errorf("delete image %s: %w", name, err)
	}
	if m.templates != nil {
		m.templates.dropImage(name)
	}
	m.log.Info("image deleted", "name", name)
	return nil
}

// CreateImage implements Manager.
func (m *VMManager) CreateImage(ctx context.Context, req sandbox.ImageRequest, progress func(sandbox.ImageEvent)) (sandbox.ImageInfo, error) {
	return sandbox.ImageInfo{}, fmt.Errorf("%w: the engine makes no images yet", sandbox.ErrNotSupported)
}
