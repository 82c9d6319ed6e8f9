package sandboxtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// Root images, by the VM manager's rules with no files: a create names
// its image (none or "default" is the daemon's own), an unknown one is
// invalid and the error names the images there are, a fork has its
// snapshot's image, and an image other than the default is deleted only
// while no sandbox or snapshot uses it. The manager starts with three:
//
//	"default"  the daemon's own (never deleted)
//	"team"     one `cellvm image build team --apt jq` made, with its
//	           manifest's Python and modules and its build's record
//	"scratch"  a built image nothing uses, for tests that delete one;
//	           it has Python and Bash but no Node (no JavaScript or
//	           TypeScript), as an OCI image may
//
// "default" and "team" have every language (python 3.11.2, javascript
// 18.19.0, typescript 5.9.3, bash 5.2.15).

// startImages returns the images a manager starts with, by name.
func startImages() map[string]sandbox.ImageInfo {
	modules := []string{"numpy 1.24.2", "pandas 1.5.3", "matplotlib 3.6.3"}
	all := []cell.LanguageInfo{{Name: cell.Python, Version: "3.11.2"}, {Name: cell.JavaScript, Version: "18.19.0"},
		{Name: cell.TypeScript, Version: "5.9.3"}, {Name: cell.Bash, Version: "5.2.15"}}
	noNode := []cell.LanguageInfo{all[0], all[3]}
	return map[string]sandbox.ImageInfo{
		sandbox.DefaultImage: {Name: sandbox.DefaultImage, SizeBytes: 1 << 30, BuiltAt: epoch, Python: "3.11.2", Modules: modules, Languages: all},
		"team": {Name: "team", SizeBytes: 1006 << 20, BuiltAt: epoch.Add(time.Hour), Python: "3.11.2", Modules: modules, Languages: all,
			Key: "sha256:5f0c2e8a91d3", Apt: []string{"jq"}, BuildSeconds: 31.5},
		"scratch": {Name: "scratch", SizeBytes: 1 << 30, BuiltAt: epoch.Add(2 * time.Hour), Python: "3.11.2", Languages: noNode,
			Key: "sha256:0b7d41c6e2aa", BuildSeconds: 27},
	}
}

// imageOf is the image a sandbox of cfg boots, "default" for none.
func imageOf(cfg sandbox.Config) string {
	if cfg.Image == "" {
		return sandbox.DefaultImage
	}
	return cfg.Image
}

// imageNames lists the images, the default first; the caller holds m.mu.
func (m *Manager) imageNames() []string {
	names := []string{sandbox.DefaultImage}
	for _, name := range slices.Sorted(maps.Keys(m.images)) {
		if name != sandbox.DefaultImage {
			names = append(names, name)
		}
	}
	return names
}

// checkImage refuses a create's image that is not there, naming the
// images that are; the caller holds m.mu and has validated the name.
func (m *Manager) checkImage(cfg sandbox.Config) error {
	if _, ok := m.images[imageOf(cfg)]; !ok {
		return fmt.Errorf("%w: no image %q; the images here are %s", sandbox.ErrInvalid, cfg.Image, strings.Join(m.imageNames(), ", "))
	}
	return nil
}

func (m *Manager) Images(ctx context.Context) ([]sandbox.ImageInfo, error) {
	if err := m.enterLocked("Images"); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	users := map[string]int{}
	for _, b := range m.boxes {
		users[imageOf(b.info.Config)]++
	}
	var out []sandbox.ImageInfo
	for _, name := range m.imageNames() {
		info := m.images[name]
		info.Sandboxes = users[name]
		out = append(out, info)
	}
	return out, nil
}

func (m *Manager) DeleteImage(ctx context.Context, name string) error {
	if err := m.enterLocked("DeleteImage", name); err != nil {
		return err
	}
	defer m.mu.Unlock()
	if name == sandbox.DefaultImage {
		return fmt.Errorf("%w: the default image is the daemon's own (serve --rootfs); it is not removed through the API", sandbox.ErrInvalid)
	}
	if !sandbox.ValidImageName(name) {
		return fmt.Errorf("%w: %q is not an image name", sandbox.ErrInvalid, name)
	}
	if _, ok := m.images[name]; !ok {
		return fmt.Errorf("%w: no image %s; the images here are %s", sandbox.ErrNotFound, name, strings.Join(m.imageNames(), ", "))
	}
	for _, id := range slices.Sorted(maps.Keys(m.boxes)) {
		if imageOf(m.boxes[id].info.Config) == name {
			return fmt.Errorf("%w: image %s is used by sandbox %s; delete it first", sandbox.ErrBusy, name, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(m.snaps)) {
		if imageOf(m.snaps[id].cfg) == name {
			return fmt.Errorf("%w: image %s is the image of snapshot %s (its forks boot from it); delete the snapshot first", sandbox.ErrBusy, name, id)
		}
	}
	delete(m.images, name)
	m.note("delete image %s", name)
	return nil
}
