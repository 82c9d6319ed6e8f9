package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// specOf reads sandbox id's VMM config.
func specOf(t *testing.T, m *VMManager, id string) control.Spec {
	t.Helper()
	spec, err := control.ReadSpec(filepath.Join(m.sandboxDir(id), specFile))
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
	img := filepath.Join(dir, store.ImageFile)
	if err := os.WriteFile(img, []byte("an ext4 in real life"), 0o444); err != nil {
		t.Fatal(err)
	}
	man := `{"python": "3.11.2", "modules": [{"import": "hello", "distribution": "hello", "version": "2.10"}], "distributions": {"hello": "2.10"}}`
	if err := os.WriteFile(filepath.Join(dir, store.ManifestFile), []byte(man), 0o444); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(state, "images", "empty"), 0o755) // no rootfs.ext4: not an image

	imgs, err := m.Images(ctx)
	if err != nil || len(imgs) != 2 || imgs[0].Name != sandbox.DefaultImage || imgs[1].Name != "extra" || imgs[1].Python != "3.11.2" ||
		len(imgs[1].Modules) != 1 || imgs[1].Modules[0] != "hello 2.10" || imgs[1].SizeBytes != 20 {
		t.Fatalf("Images = %+v, %v", imgs, err)
	}

	before, _ := os.ReadDir(filepath.Join(state, "sandboxes"))
	for _, name := range []string{"nope", "empty"} {
		_, err := m.Create(ctx, sandbox.Config{Image: name})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "default, extra") {
			t.Errorf("image %q: %v, want ErrInvalid naming default, extra", name, err)
		}
	}
	if _, err := m.Create(ctx, sandbox.Config{Image: "Bad/Name"}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a bad image name: %v, want ErrInvalid", err)
	}
	if after, _ := os.ReadDir(filepath.Join(state, "sandboxes")); len(after) != len(before) {
		t.Errorf("refused creates left sandbox directories: %d, then %d", len(before), len(after))
	}

	a, err := m.Create(ctx, sandbox.Config{Image: "extra"})
	if err != nil {
		t.Fatal(err)
	}
	if d := specOf(t, m, a.ID).Disks; len(d) != 1 || d[0].Path != img || !d[0].ReadOnly {
		t.Errorf("the VMM's disks for image extra: %+v, want %s read-only", d, img)
	}
	def, err := m.Create(ctx, sandbox.Config{})
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
	if _, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID, Image: sandbox.DefaultImage}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a fork asking for another image: %v, want ErrInvalid", err)
	}
	f, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatal(err)
	}
	if f.Config.Image != "extra" || specOf(t, m, f.ID).Disks[0].Path != img {
		t.Errorf("the fork: image %q, disk %s; want its snapshot's", f.Config.Image, specOf(t, m, f.ID).Disks[0].Path)
	}
	// Deleting the image: refused while a sandbox uses it, then while a
	// snapshot was taken of it, then gone.
	if err := m.DeleteImage(ctx, "extra"); !errors.Is(err, sandbox.ErrBusy) || !strings.Contains(err.Error(), "sandbox") {
		t.Errorf("delete an image sandboxes use: %v, want ErrBusy naming a sandbox", err)
	}
	for _, id := range []string{a.ID, def.ID, f.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
	if err := m.DeleteImage(ctx, "extra"); !errors.Is(err, sandbox.ErrBusy) || !strings.Contains(err.Error(), snap.ID) {
		t.Errorf("delete an image a snapshot has: %v, want ErrBusy naming %s", err, snap.ID)
	}
	if err := m.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteImage(ctx, "extra"); err != nil {
		t.Fatalf("delete an unused image: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the deleted image's directory: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "images", ".rm-*")); len(left) != 0 {
		t.Errorf("the delete left %v", left)
	}
	if imgs, _ := m.Images(ctx); len(imgs) != 1 || imgs[0].Name != sandbox.DefaultImage {
		t.Errorf("images after the delete: %+v", imgs)
	}
	if err := m.DeleteImage(ctx, "extra"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("delete it again: %v, want ErrNotFound", err)
	}
	for _, name := range []string{sandbox.DefaultImage, "", "../x"} {
		if err := m.DeleteImage(ctx, name); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("delete image %q: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := os.Stat(m.opt.RootFS); err != nil {
		t.Errorf("the default image: %v", err)
	}
}

// TestTemplatesPerImage, over fake VMMs: an image's first plain create
// boots and asks for that image's template (its key other than the
// default's); the next restores it and its VMM is given the image; an
// image rebuilt (a new file in its place) makes its template stale; the
// image's deletion drops its template.
func TestTemplatesPerImage(t *testing.T) {
	m, state, _ := newTemplateManager(t, nil)
	ctx := context.Background()
	def := waitTemplate(t, m, sandbox.DefaultVCPUs, sandbox.DefaultMemoryMiB, sandbox.TemplateReady, "")
	if def.Image != sandbox.DefaultImage {
		t.Errorf("the default template's image: %q", def.Image)
	}
	dir := filepath.Join(state, "images", "extra")
	os.MkdirAll(dir, 0o755)
	img := filepath.Join(dir, store.ImageFile)
	if err := os.WriteFile(img, []byte("image one"), 0o444); err != nil {
		t.Fatal(err)
	}
	waitImage := func(notKey string) sandbox.TemplateInfo {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
			c, _ := m.Capacity(ctx)
			for _, in := range c.Templates {
				if in.Image == "extra" && in.State == sandbox.TemplateReady && in.Key != notKey {
					return in
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no ready template of image extra within a minute")
		return sandbox.TemplateInfo{}
	}
	first := createFrom(t, m, sandbox.Config{Image: "extra"}, sandbox.StartedFromBoot)
	tpl := waitImage("")
	if tpl.Key == def.Key || tpl.VCPUs != def.VCPUs || tpl.MemoryMiB != def.MemoryMiB {
		t.Errorf("image extra's template %+v beside the default's %+v: want the same shape under another key", tpl, def)
	}
	second := createFrom(t, m, sandbox.Config{Image: "extra"}, sandbox.StartedFromTemplate)
	if d := specOf(t, m, second.ID).Disks; len(d) != 1 || d[0].Path != img {
		t.Errorf("the template-started sandbox's disks: %+v, want image extra's", d)
	}
	createFrom(t, m, sandbox.Config{}, sandbox.StartedFromTemplate) // the default's is still there

	// A rebuild puts a new file in place: the template is stale.
	next := filepath.Join(dir, "next")
	os.WriteFile(next, []byte("image two"), 0o444)
	if err := os.Rename(next, img); err != nil {
		t.Fatal(err)
	}
	third := createFrom(t, m, sandbox.Config{Image: "extra"}, sandbox.StartedFromBoot)
	waitImage(tpl.Key)

	for _, id := range []string{first.ID, second.ID, third.ID} {
		m.Delete(ctx, id)
	}
	if err := m.DeleteImage(ctx, "extra"); err != nil {
		t.Fatal(err)
	}
	c, _ := m.Capacity(ctx)
	for _, in := range c.Templates {
		if in.Image == "extra" {
			t.Errorf("a template of the deleted image is left: %+v", in)
		}
	}
}

// mkfsImage writes a small ext4 with the given UUID at path, as a build
// would (through a rename, so a sandbox holding the old file keeps it).
func mkfsImage(t *testing.T, path, uuid string) {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4 (e2fsprogs)")
	}
	tmp := path + ".new"
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-U", uuid, tmp, "4M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRebuiltImageRefusesOldMachines, over fake VMMs with real ext4
// images: a paused sandbox and a snapshot of an image that was rebuilt
// since (another ext4 UUID) are refused, resume and fork, saying so,
// since their memory caches the old image's files; a new sandbox boots the
// new image; before the rebuild both worked.
func TestRebuiltImageRefusesOldMachines(t *testing.T) {
	m, state := newPausableManager(t, nil)
	ctx := context.Background()
	dir := filepath.Join(state, "images", "team")
	os.MkdirAll(dir, 0o755)
	img := filepath.Join(dir, store.ImageFile)
	mkfsImage(t, img, "11111111-2222-3333-4444-555555555555")

	a, err := m.Create(ctx, sandbox.Config{Image: "team"})
	if err != nil {
		t.Fatal(err)
	}
	if u := specOf(t, m, a.ID).ImageUUID; u != "11111111-2222-3333-4444-555555555555" {
		t.Errorf("the VMM config records image UUID %q", u)
	}
	snap, err := m.Snapshot(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	f, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("a fork before the rebuild: %v", err)
	}
	m.Delete(ctx, f.ID)
	if err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Resume(ctx, a.ID); err != nil {
		t.Fatalf("a resume before the rebuild: %v", err)
	}
	if err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}

	mkfsImage(t, img, "66666666-7777-8888-9999-000000000000")
	if err := m.Resume(ctx, a.ID); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "rebuilt") {
		t.Errorf("resume over a rebuilt image: %v, want ErrInvalid saying it was rebuilt", err)
	}
	if info, err := m.Get(ctx, a.ID); err != nil || info.State != sandbox.StatePaused {
		t.Errorf("after the refused resume: %+v, %v; want it still paused", info.State, err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "rebuilt") {
		t.Errorf("a fork over a rebuilt image: %v, want ErrInvalid saying it was rebuilt", err)
	}
	b, err := m.Create(ctx, sandbox.Config{Image: "team"})
	if err != nil {
		t.Fatalf("a new sandbox of the rebuilt image: %v", err)
	}
	if u := specOf(t, m, b.ID).ImageUUID; u != "66666666-7777-8888-9999-000000000000" {
		t.Errorf("the new sandbox's image UUID %q", u)
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
	m.DeleteSnapshot(ctx, snap.ID)
}

// TestImageLanguages: the default image's languages are its manifest's
// (beside it); an image the builder made has the builder's (its record),
// which win over its manifest's; an image recorded before languages were
// has none: unknown.
func TestImageLanguages(t *testing.T) {
	m, state := newPausableManager(t, nil)
	const langs = `"languages": [{"name": "python", "version": "3.11.2"}, {"name": "javascript", "version": "18.19.0"}, {"name": "typescript", "version": "5.9.3"}, {"name": "bash", "version": "5.2.15"}]`
	man := func(languages string) string {
		return `{"python": "3.11.2", ` + languages + `"modules": [{"import": "a", "distribution": "a", "version": "1"}], "distributions": {"a": "1"}}`
	}
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(filepath.Dir(m.opt.RootFS), manifest.BuildFile), man(langs+", "))
	// Built on the default image, then node removed: the builder found
	// python3 and bash; its manifest still says what the base had.
	write(filepath.Join(state, "images", "built", store.ImageFile), "ext4")
	write(filepath.Join(state, "images", "built", store.ManifestFile), man(langs+", "))
	write(filepath.Join(state, "images", "built", store.BuildFile),
		`{"key": "k", "name": "built", "base": "default", "base_uuid": "", "config": {}, "languages": [{"name": "python", "version": "3.11.2"}, {"name": "bash", "version": "5.2.15"}]}`)
	write(filepath.Join(state, "images", "old", store.ImageFile), "ext4")
	write(filepath.Join(state, "images", "old", store.ManifestFile), man(""))
	write(filepath.Join(state, "images", "old", store.BuildFile), `{"key": "k", "name": "old", "base": "default", "base_uuid": "", "config": {}}`)
	// A manifest with a language cellvm does not know is no manifest.
	write(filepath.Join(state, "images", "odd", store.ImageFile), "ext4")
	write(filepath.Join(state, "images", "odd", store.ManifestFile), man(`"languages": [{"name": "cobol", "version": "85"}], `))

	imgs, err := m.Images(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, im := range imgs {
		got[im.Name] = fmt.Sprint(im.Languages)
	}
	for name, want := range map[string]string{
		sandbox.DefaultImage: "[{python 3.11.2} {javascript 18.19.0} {typescript 5.9.3} {bash 5.2.15}]",
		"built":              "[{python 3.11.2} {bash 5.2.15}]",
		"old":                "[]",
		"odd":                "[]",
	} {
		if got[name] != want {
			t.Errorf("image %s: languages %s, want %s", name, got[name], want)
		}
	}
}
