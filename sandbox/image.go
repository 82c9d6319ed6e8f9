package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cellvm/cellvm/image/manifest"
)

// Images are the root file systems sandboxes boot. The default one is the
// daemon's own (Options.RootFS, with its manifest beside it); the others
// lie under StateDir/images/NAME/, each a read-only rootfs.ext4 and the
// manifest.json its build recorded, put there by an image build. A
// sandbox names its image in Config.Image; a fork keeps its snapshot's,
// since its memory holds the page cache of that image's files. Templates
// are only made of the default image (a template of another would be a
// template per image and shape: not yet).

// DefaultImage names the daemon's own image.
const DefaultImage = "default"

// Files of an image directory.
const (
	imageFile         = "rootfs.ext4"
	imageManifestFile = "manifest.json"
)

// ImageInfo describes an image.
type ImageInfo struct {
	Name      string    `json:"name"`
	SizeBytes int64     `json:"size_bytes"`
	BuiltAt   time.Time `json:"built_at"`
	// Python and Modules are from the image's manifest, when it has one:
	// the interpreter's version and the featured modules with theirs.
	Python  string   `json:"python,omitempty"`
	Modules []string `json:"modules,omitempty"`
	// Sandboxes counts the sandboxes that use it now.
	Sandboxes int `json:"sandboxes"`
}

// ValidImageName reports whether name can name an image (the rule of
// workspace names: it names a directory on the host).
func ValidImageName(name string) bool { return ValidWorkspaceName(name) }

func (m *VMManager) imagesDir() string { return filepath.Join(m.opt.StateDir, "images") }

// isDefaultImage reports whether name is the daemon's own image.
func isDefaultImage(name string) bool { return name == "" || name == DefaultImage }

// imagePath is the root image file of image name, or ErrInvalid naming
// the images there are.
func (m *VMManager) imagePath(name string) (string, error) {
	if isDefaultImage(name) {
		return m.opt.RootFS, nil
	}
	p := filepath.Join(m.imagesDir(), name, imageFile)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
		return p, nil
	}
	return "", fmt.Errorf("%w: no image %q; the images here are %s", ErrInvalid, clip(name, 64), strings.Join(m.imageNames(), ", "))
}

// imageNames lists the images: the default first, then the others by name.
func (m *VMManager) imageNames() []string {
	names := []string{DefaultImage}
	ents, _ := os.ReadDir(m.imagesDir())
	for _, e := range ents {
		if e.IsDir() && ValidImageName(e.Name()) && e.Name() != DefaultImage {
			if fi, err := os.Stat(filepath.Join(m.imagesDir(), e.Name(), imageFile)); err == nil && fi.Mode().IsRegular() {
				names = append(names, e.Name())
			}
		}
	}
	sort.Strings(names[1:])
	return names
}

// Images implements Manager.
func (m *VMManager) Images(ctx context.Context) ([]ImageInfo, error) {
	m.mu.Lock()
	users := map[string]int{}
	for _, s := range m.sandboxes {
		if !s.internal {
			name := s.cfg.Image
			if isDefaultImage(name) {
				name = DefaultImage
			}
			users[name]++
		}
	}
	m.mu.Unlock()
	var out []ImageInfo
	for _, name := range m.imageNames() {
		path, err := m.imagePath(name)
		if err != nil {
			continue // removed meanwhile
		}
		fi, err := os.Stat(path)
		if err != nil {
			continue
		}
		info := ImageInfo{Name: name, SizeBytes: fi.Size(), BuiltAt: fi.ModTime().UTC(), Sandboxes: users[name]}
		mf := filepath.Join(filepath.Dir(path), imageManifestFile)
		if name == DefaultImage {
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
		out = append(out, info)
	}
	return out, nil
}
