package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// specOf reads sandbox id's VMM config.
func specOf(t *testing.T, m *VMManager, id string) VMSpec {
	t.Helper()
	var spec VMSpec
	b, err := os.ReadFile(filepath.Join(m.sandboxDir(id), specFile))
	if err == nil {
		err = json.Unmarshal(b, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestImagesBootWhatTheyName, over fake VMMs: an image under the state
// directory's images/ is listed with its manifest's facts and booted by a
// sandbox that names it; an unknown image is refused naming those there
// are, leaving nothing; a fork has its snapshot's image and cannot ask for
// another.
func TestImagesBootWhatTheyName(t *testing.T) {
	m, state := newPausableManager(t, nil)
	ctx := context.Background()
	dir := filepath.Join(state, "images", "extra")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, imageFile)
	if err := os.WriteFile(img, []byte("an ext4 in real life"), 0o444); err != nil {
		t.Fatal(err)
	}
	man := `{"python": "3.11.2", "modules": [{"import": "hello", "distribution": "hello", "version": "2.10"}], "distributions": {"hello": "2.10"}}`
	if err := os.WriteFile(filepath.Join(dir, imageManifestFile), []byte(man), 0o444); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(state, "images", "empty"), 0o755) // no rootfs.ext4: not an image

	imgs, err := m.Images(ctx)
	if err != nil || len(imgs) != 2 || imgs[0].Name != DefaultImage || imgs[1].Name != "extra" || imgs[1].Python != "3.11.2" ||
		len(imgs[1].Modules) != 1 || imgs[1].Modules[0] != "hello 2.10" || imgs[1].SizeBytes != 20 {
		t.Fatalf("Images = %+v, %v", imgs, err)
	}

	before, _ := os.ReadDir(filepath.Join(state, "sandboxes"))
	for _, name := range []string{"nope", "empty"} {
		_, err := m.Create(ctx, Config{Image: name})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "default, extra") {
			t.Errorf("image %q: %v, want ErrInvalid naming default, extra", name, err)
		}
	}
	if _, err := m.Create(ctx, Config{Image: "Bad/Name"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a bad image name: %v, want ErrInvalid", err)
	}
	if after, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(after) != len(before) {
		t.Errorf("refused creates left sandbox directories: %d, then %d", len(before), len(after))
	}

	a, err := m.Create(ctx, Config{Image: "extra"})
	if err != nil {
		t.Fatal(err)
	}
	if d := specOf(t, m, a.ID).Disks; len(d) != 1 || d[0].Path != img || !d[0].ReadOnly {
		t.Errorf("the VMM's disks for image extra: %+v, want %s read-only", d, img)
	}
	def, err := m.Create(ctx, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if d := specOf(t, m, def.ID).Disks; d[0].Path != m.opt.RootFS {
		t.Errorf("the default image's disk: %s, want %s", d[0].Path, m.opt.RootFS)
	}
	if imgs, _ := m.Images(ctx); imgs[0].Sandboxes != 1 || imgs[1].Sandboxes != 1 {
		t.Errorf("users: %+v, want one sandbox each", imgs)
	}

	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, Config{Snapshot: snap.ID, Image: DefaultImage}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a fork asking for another image: %v, want ErrInvalid", err)
	}
	f, err := m.Create(ctx, Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if f.Config.Image != "extra" || specOf(t, m, f.ID).Disks[0].Path != img {
		t.Errorf("the fork: image %q, disk %s; want its snapshot's", f.Config.Image, specOf(t, m, f.ID).Disks[0].Path)
	}
	for _, id := range []string{a.ID, def.ID, f.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
}
