package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
)

// fakeFetcher serves one OCI image from memory.
type fakeFetcher struct {
	digest string
	layers []string
	config buildplan.Config
	// corrupt makes layer 1's stream fail at its end (a digest mismatch).
	corrupt bool
	mu      sync.Mutex
	pulls   int
	closed  int
}

func (f *fakeFetcher) image(ref string) *FetchedImage {
	img := &FetchedImage{Ref: ref, Digest: f.digest, Config: f.config, Close: func() error {
		f.mu.Lock()
		f.closed++
		f.mu.Unlock()
		return nil
	}}
	for _, l := range f.layers {
		img.Layers = append(img.Layers, buildplan.Layer{MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: "sha256:" + testKey(l), Size: int64(len(l))})
	}
	img.Open = func(i int) (io.ReadCloser, error) {
		r := io.Reader(strings.NewReader(f.layers[i]))
		if f.corrupt && i == 1 {
			r = io.MultiReader(r, errReader{})
		}
		return io.NopCloser(r), nil
	}
	return img
}

func (f *fakeFetcher) Pull(ctx context.Context, ref string, opt FetchOptions) (*FetchedImage, error) {
	f.mu.Lock()
	f.pulls++
	f.mu.Unlock()
	if ref == "registry.example/missing:1" {
		return nil, errors.New("manifest unknown: " + sandbox.ErrUpstream.Error())
	}
	return f.image(ref), nil
}

func (f *fakeFetcher) Import(ctx context.Context, r io.Reader, opt FetchOptions) (*FetchedImage, error) {
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	return f.image(""), nil
}

// newBuilderManager is a manager whose VMMs are fake builder VMs, its
// default image a real (small) ext4, and its fetcher f.
func newBuilderManager(t *testing.T, f *fakeFetcher, mode string) (*VMManager, string, string) {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	t.Setenv("CELLVM_TEST_FAKE_VMM", "builder")
	t.Setenv("CELLVM_TEST_BUILD", mode)
	guest := t.TempDir()
	t.Setenv("CELLVM_TEST_BUILD_DIR", guest)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, state := newTestManager(t, exe, func(o *Options) {
		o.BootTimeout = 30 * time.Second
		o.CallGrace = 2 * time.Second
		o.ImageBuild = ImageBuildOptions{DiskMiB: 128, Fetch: f,
			progressFile: filepath.Join(guest, "progress"), resultFile: filepath.Join(guest, "result.json")}
	})
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-U", "11111111-2222-3333-4444-555555555555", m.opt.RootFS, "4096").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	return m, state, guest
}

// assertNoBuildLeft: no builder VM, no work directory, no process.
func assertNoBuildLeft(t *testing.T, m *VMManager, state string, images ...string) {
	t.Helper()
	assertNothingLeft(t, m, state)
	if d, _ := filepath.Glob(filepath.Join(m.imageBuildDir(), "*")); len(d) != 0 {
		t.Errorf("builder VM directories left: %v", d)
	}
	ents, _ := os.ReadDir(m.images().Dir)
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(images, ",") {
		t.Errorf("the images directory holds %q, want %q", got, images)
	}
	m.mu.Lock()
	n := len(m.sandboxes)
	m.mu.Unlock()
	if n != 0 {
		t.Errorf("%d VMs still held", n)
	}
}

func events() (*[]sandbox.ImageEvent, func(sandbox.ImageEvent)) {
	var mu sync.Mutex
	var evs []sandbox.ImageEvent
	return &evs, func(ev sandbox.ImageEvent) {
		mu.Lock()
		evs = append(evs, ev)
		mu.Unlock()
	}
}

func steps(evs []sandbox.ImageEvent) string {
	var s []string
	for _, e := range evs {
		if len(s) == 0 || s[len(s)-1] != e.Step {
			s = append(s, e.Step)
		}
	}
	return strings.Join(s, " ")
}

// TestPullMakesAnImageInABuilderVM, over fake builder VMs: a pull streams
// the layers into the inputs disk after the plan, boots the builder,
// checks the out disk's superblock, installs the image (record, manifest,
// read-only file cut to the file system's size) and lists it with its
// source, digest and config; the same pull again is a cache hit with no
// VM; a taken name without replace is ErrBusy.
func TestPullMakesAnImageInABuilderVM(t *testing.T) {
	f := &fakeFetcher{digest: "sha256:" + testKey("img1"), layers: []string{"layer one", "layer two!"}, config: buildplan.Config{Env: []string{"PATH=/usr/bin"}, User: "app"}}
	m, state, guest := newBuilderManager(t, f, "")
	ctx := context.Background()
	evs, progress := events()
	info, err := m.CreateImage(ctx, sandbox.ImageRequest{Name: "web", Pull: "registry.example/web:1"}, progress)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "web" || info.Source != sandbox.ImageSourcePull || info.Digest != f.digest || info.Ref != "registry.example/web:1" ||
		info.SizeBytes != 8<<20 || info.User != "app" || len(info.Env) != 1 || info.Python != "3.11.2" || info.Tenant != "" {
		t.Errorf("info %+v", info)
	}
	// The languages the builder found (python3 and bash, no node) are
	// recorded and listed.
	if got := fmt.Sprint(info.Languages); got != "[{python 3.11.2} {bash 5.2.15}]" {
		t.Errorf("languages %s, want python and bash", got)
	}
	if got := steps(*evs); got != "fetch boot extract mkfs install done" {
		t.Errorf("steps %q", got)
	}
	// The inputs disk as the guest saw it: plan first, layers last.
	b, err := os.ReadFile(filepath.Join(guest, "inputs.tar"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range readTar(t, b) {
		names = append(names, e.hdr.Name)
	}
	if strings.Join(names, " ") != "plan.json collect.py modules.txt layers/0000 layers/0001" {
		t.Errorf("inputs disk %q", names)
	}
	img := filepath.Join(m.images().Dir, "web", store.ImageFile)
	fi, err := os.Stat(img)
	if err != nil || fi.Size() != 8<<20 || fi.Mode().Perm() != 0o444 {
		t.Errorf("the image file: %v, %v", fi, err)
	}
	rec, err := store.ReadRecord(filepath.Dir(img))
	if err != nil || rec.Digest != f.digest || rec.Source != sandbox.ImageSourcePull || rec.Key != info.Key {
		t.Errorf("record %+v, %v", rec, err)
	}
	if u, _ := store.FSUUID(img); u != buildplan.UUIDOf(info.Key) {
		t.Errorf("the image's UUID %s is not its key's", u)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(img), store.ManifestFile)); err != nil {
		t.Errorf("no manifest: %v", err)
	}
	list, _ := m.Images(ctx)
	if len(list) != 2 || list[1].Name != "web" || list[1].Digest != f.digest || list[1].Source != sandbox.ImageSourcePull {
		t.Errorf("Images() = %+v", list)
	}
	assertNoBuildLeft(t, m, state, "web")

	if _, err := m.CreateImage(ctx, sandbox.ImageRequest{Name: "web", Pull: "registry.example/web:1"}, nil); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("a taken name without replace: %v, want ErrBusy", err)
	}
	os.Remove(filepath.Join(guest, "inputs.tar"))
	again, err := m.CreateImage(ctx, sandbox.ImageRequest{Name: "web", Pull: "registry.example/web:1", Replace: true}, nil)
	if err != nil || again.Key != info.Key {
		t.Fatalf("the same pull again: %+v, %v", again, err)
	}
	if _, err := os.Stat(filepath.Join(guest, "inputs.tar")); err == nil {
		t.Error("a cache hit booted a builder VM")
	}
	// A new digest replaces it.
	f.digest = "sha256:" + testKey("img2")
	newer, err := m.CreateImage(ctx, sandbox.ImageRequest{Name: "web", Pull: "registry.example/web:1", Replace: true}, nil)
	if err != nil || newer.Digest != f.digest || newer.Key == info.Key {
		t.Fatalf("a new digest: %+v, %v", newer, err)
	}
	assertNoBuildLeft(t, m, state, "web")
	if f.closed != f.pulls {
		t.Errorf("%d fetched images, %d closed", f.pulls, f.closed)
	}
}

// TestFailedBuildsLeaveNothing: a failed step is ErrBuildFailed naming it
// with the end of its output; an out disk that is not the plan's, a
// result that is not one, a layer that fails its digest, a deadline: each
// fails, and leaves no VM, no work and the image there was as it was.
func TestFailedBuildsLeaveNothing(t *testing.T) {
	for _, c := range []struct {
		mode, want, step string
		corrupt          bool
		timeout          time.Duration
	}{
		{mode: "fail", want: "exited with status 100", step: sandbox.ImageStepApt},
		{mode: "uuid", want: "UUID", step: sandbox.ImageStepInstall},
		{mode: "size", want: "builder said", step: sandbox.ImageStepInstall},
		{mode: "result", want: "unknown field", step: sandbox.ImageStepInstall},
		{mode: "languages", want: `"cobol" is not one of`, step: sandbox.ImageStepInstall},
		{mode: "", corrupt: true, want: "digest mismatch", step: sandbox.ImageStepFetch},
		{mode: "hang", want: "deadline", step: sandbox.ImageStepRun, timeout: 4 * time.Second},
	} {
		t.Run(c.mode+map[bool]string{true: "corrupt"}[c.corrupt], func(t *testing.T) {
			f := &fakeFetcher{digest: "sha256:" + testKey("x"), layers: []string{"a", "b"}, corrupt: c.corrupt}
			m, state, _ := newBuilderManager(t, f, c.mode)
			_, err := m.CreateImage(context.Background(), sandbox.ImageRequest{Name: "web", Pull: "r.example/web:1", Timeout: c.timeout}, nil)
			var se *sandbox.ImageStepError
			if !errors.As(err, &se) || se.Step != c.step || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want a step %q error saying %q", err, c.step, c.want)
			}
			if c.mode == "fail" && (!errors.Is(err, sandbox.ErrBuildFailed) || !strings.Contains(se.Tail, "Unable to locate package nope")) {
				t.Errorf("a failed apt: %v, tail %q", err, se.Tail)
			}
			if c.corrupt && !errors.Is(err, sandbox.ErrUpstream) {
				t.Errorf("a corrupt layer: %v, want ErrUpstream", err)
			}
			assertNoBuildLeft(t, m, state)
		})
	}
}

// TestRecipeBuildsOnTheCallersBaseAsItsTenant: a tenant's recipe copies
// its base (the default image) into the out disk and checks its archive
// against its steps; the image is the tenant's (TENANT~NAME), which its
// sandboxes resolve before a shared one of the name, other tenants do not
// see, and the tenant deletes.
func TestRecipeBuildsOnTheCallersBaseAsItsTenant(t *testing.T) {
	m, state, guest := newBuilderManager(t, &fakeFetcher{}, "")
	ctx := context.Background()
	archive := tarOf(t, [2]string{"tree/etc/motd", "hello"})
	req := sandbox.ImageRequest{Name: "web", Tenant: "acme", Archive: bytes.NewReader(archive),
		Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{{CopyFrom: "tree", CopyTo: "/"}, {Env: []string{"A=1"}, WorkingDir: "/srv"}}}}
	info, err := m.CreateImage(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tenant != "acme" || info.Source != sandbox.ImageSourceBuild || info.Base != sandbox.DefaultImage || info.WorkingDir != "/srv" {
		t.Errorf("info %+v", info)
	}
	b, _ := os.ReadFile(filepath.Join(guest, "inputs.tar"))
	ents := readTar(t, b)
	if len(ents) != 4 || ents[3].hdr.Name != "inputs/tree/etc/motd" || ents[3].body != "hello" {
		t.Errorf("inputs disk: %d entries", len(ents))
	}
	assertNoBuildLeft(t, m, state, "acme~web")

	// A step naming what the archive lacks, and one that needs the
	// network on a daemon without network policies.
	for _, steps := range [][]sandbox.RecipeStep{{{CopyFrom: "nope"}}, {{Apt: []string{"curl"}}}} {
		r := sandbox.ImageRequest{Name: "other", Archive: bytes.NewReader(archive), Recipe: &sandbox.ImageRecipe{Steps: steps}}
		if _, err := m.CreateImage(ctx, r, nil); !errors.Is(err, sandbox.ErrInvalid) && !errors.Is(err, sandbox.ErrNotSupported) {
			t.Errorf("steps %+v: %v", steps, err)
		}
	}
	// A base the tenant does not see.
	r := sandbox.ImageRequest{Name: "other", Tenant: "zeta", Recipe: &sandbox.ImageRecipe{Base: "web", Steps: []sandbox.RecipeStep{{Run: "true"}}}}
	if _, err := m.CreateImage(ctx, r, nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("another tenant's base: %v, want ErrInvalid", err)
	}
	assertNoBuildLeft(t, m, state, "acme~web")

	if e, err := m.imageEntry("acme", "web"); err != nil || e != "acme~web" {
		t.Errorf("acme's web: %q, %v", e, err)
	}
	if _, err := m.imageEntry("zeta", "web"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("zeta resolved acme's image: %v", err)
	}
	if err := m.DeleteImage(sandbox.WithCaller(ctx, sandbox.Caller{Tenant: "zeta"}), "web"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("zeta deleting acme's web: %v, want ErrNotFound", err)
	}
	if err := m.DeleteImage(sandbox.WithCaller(ctx, sandbox.Caller{Tenant: "acme"}), "web"); err != nil {
		t.Errorf("acme deleting its web: %v", err)
	}
	assertNoBuildLeft(t, m, state)
}
