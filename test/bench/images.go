package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cellvm/cellvm/image/oci"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/engine"
)

// benchImages measures images users bring, each against the default
// image in the same run:
//
//   - pull: the rig's python:slim-like image (test/nested/rig-fixtures.sh,
//     debootstrap minbase with python3) from go-containerregistry's
//     registry on loopback, end to end (fetch, builder VM, layers
//     applied, ext4 checked and installed), in MiB/s of what was fetched,
//     with the time of each step;
//   - import: its `docker save` tarball (another config, so no cache hit),
//     in MiB/s of the archive;
//   - first create: a sandbox of the pulled image to its first cell's
//     result, cold (no templates) and from its template, against the
//     default image's.
//
// Ratios only: nothing here is a promise.
func benchImages(cellvm, build string) error {
	layerFile := filepath.Join(build, "rig/fixtures/pyslim.tar.gz")
	if _, err := os.Stat(layerFile); err != nil {
		return fmt.Errorf("%s is missing: run test/nested/rig-fixtures.sh (make bench does)", layerFile)
	}
	fmt.Printf("\nimages: pull and import of a python:slim-like image, and its first create against the default image's (1 vCPU, %d MiB), nested rig %s\n",
		snapShape.MemoryMiB, time.Now().Format("2006-01-02"))
	l1, err := tarball.LayerFromFile(layerFile)
	if err != nil {
		return err
	}
	pushed, err := benchImage(l1, nil)
	if err != nil {
		return err
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/pyslim:bench"
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(r, pushed); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	fetched, err := imageBytes(pushed)
	if err != nil {
		return err
	}
	images, err := os.MkdirTemp("", "cellvm-bench-images")
	if err != nil {
		return err
	}
	defer os.RemoveAll(images)
	withImages := func(o *engine.Options) { o.ImagesDir = images; o.ImageBuild.Fetch = benchFetcher{} }
	ctx := context.Background()

	m, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{}, withImages)
	if err != nil {
		return err
	}
	defer done()
	steps := &stepClock{start: time.Now()}
	if _, err := m.CreateImage(ctx, sandbox.ImageRequest{Name: "pyslim", Pull: ref, Insecure: true}, steps.add); err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	pull := time.Since(steps.start)
	fmt.Printf("pull: %.1f MiB in %v: %.1f MiB/s (%s)\n", mib(fetched), pull.Round(time.Millisecond), mib(fetched)/pull.Seconds(), steps.String())

	if err := benchImport(ctx, m, l1); err != nil {
		fmt.Println("bench: images: import:", err)
	}

	// Cold: the default image and the pulled one, alternating, three
	// times; the median of each (the faster of two let one lucky boot set
	// the ratio: 6.2 s against 9.7-9.9 s for the other three, 2026-12-04).
	const coldRounds = 3
	cold := map[string][]time.Duration{}
	for range coldRounds {
		for _, image := range []string{sandbox.DefaultImage, "pyslim"} {
			first, _, err := firstCell(ctx, m, image)
			if err != nil {
				return fmt.Errorf("cold create of %s: %w", image, err)
			}
			cold[image] = append(cold[image], first)
			fmt.Printf("cold create of %s: first cell result in %v\n", image, first.Round(time.Millisecond))
		}
	}
	done()
	coldDef, coldSlim := medianDur(cold[sandbox.DefaultImage]), medianDur(cold["pyslim"])
	fmt.Printf("ratio pulled / default image, cold create to first cell result: %.2f (%v vs %v, medians of %d)\n",
		ms(coldSlim)/ms(coldDef), coldSlim.Round(time.Millisecond), coldDef.Round(time.Millisecond), coldRounds)
	return benchImageTemplates(ctx, cellvm, build, withImages)
}

// benchImport imports a `docker save` tarball of the image with another
// config (so another digest: no cache hit) and prints its rate.
func benchImport(ctx context.Context, m *engine.VMManager, l1 v1.Layer) error {
	img, err := benchImage(l1, map[string]string{"org.cellvm.bench": "import"})
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "cellvm-bench-import-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	f.Close()
	tag, err := name.NewTag("pyslim:import")
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(f.Name(), tag, img); err != nil {
		return err
	}
	st, err := os.Stat(f.Name())
	if err != nil {
		return err
	}
	archive, err := os.Open(f.Name())
	if err != nil {
		return err
	}
	defer archive.Close()
	steps := &stepClock{start: time.Now()}
	if _, err := m.CreateImage(ctx, sandbox.ImageRequest{Name: "pyslim-imported", Import: true, Archive: archive}, steps.add); err != nil {
		return err
	}
	d := time.Since(steps.start)
	fmt.Printf("import: %.1f MiB archive in %v: %.1f MiB/s (%s)\n", mib(st.Size()), d.Round(time.Millisecond), mib(st.Size())/d.Seconds(), steps.String())
	return nil
}

// benchImageTemplates starts a manager with templates on over the same
// images, makes each image's template (the pulled one's after its first
// create) and times creates from them.
func benchImageTemplates(ctx context.Context, cellvm, build string, withImages func(*engine.Options)) error {
	m, done, err := newBenchManager(cellvm, build, nil, engine.TemplateOptions{Enabled: true, BuildTimeout: templateWait}, withImages)
	if err != nil {
		return err
	}
	defer done()
	for _, image := range []string{sandbox.DefaultImage, "pyslim"} {
		if _, _, err := firstCell(ctx, m, image); err != nil {
			return fmt.Errorf("first create of %s with templates on: %w", image, err)
		}
	}
	for _, image := range []string{sandbox.DefaultImage, "pyslim"} {
		if err := waitTemplate(ctx, m, image); err != nil {
			return err
		}
	}
	const rounds = 3
	tpl := map[string][]time.Duration{}
	for range rounds {
		for _, image := range []string{sandbox.DefaultImage, "pyslim"} {
			first, from, err := firstCell(ctx, m, image)
			if err != nil {
				return fmt.Errorf("template create of %s: %w", image, err)
			}
			if from != sandbox.StartedFromTemplate {
				return fmt.Errorf("TEMPLATE NOT USED: a create of %s with its template ready started from %q", image, from)
			}
			tpl[image] = append(tpl[image], first)
			fmt.Printf("template create of %s: first cell result in %v\n", image, first.Round(time.Millisecond))
		}
	}
	def, slim := medianDur(tpl[sandbox.DefaultImage]), medianDur(tpl["pyslim"])
	fmt.Printf("ratio pulled / default image, create from its template to first cell result: %.2f (%v vs %v, medians of %d)\n",
		ms(slim)/ms(def), slim.Round(time.Millisecond), def.Round(time.Millisecond), rounds)
	return nil
}

// waitTemplate waits until the template of snapShape for image is ready.
func waitTemplate(ctx context.Context, m *engine.VMManager, image string) error {
	start := time.Now()
	for {
		c, err := m.Capacity(ctx)
		if err != nil {
			return err
		}
		for _, t := range c.Templates {
			if t.VCPUs != snapShape.VCPUs || t.MemoryMiB != snapShape.MemoryMiB || t.Root ||
				!(t.Image == image || image == sandbox.DefaultImage && t.Image == "") {
				continue
			}
			switch t.State {
			case sandbox.TemplateReady:
				fmt.Printf("template of %s ready after %v, %.1f MiB on disk\n", image, time.Since(start).Round(time.Second), mib(t.SizeBytes))
				return nil
			case sandbox.TemplateFailed:
				return fmt.Errorf("the template of %s failed: %s", image, t.Error)
			}
		}
		if time.Since(start) > templateWait {
			return fmt.Errorf("the template of %s was not ready after %v: %+v", image, templateWait, c.Templates)
		}
		time.Sleep(2 * time.Second)
	}
}

// firstCell creates a sandbox of image in snapShape, times its first
// cell's result, deletes it, and says how it started.
func firstCell(ctx context.Context, m *engine.VMManager, image string) (time.Duration, string, error) {
	cfg := snapShape
	cfg.Image = image
	start := time.Now()
	info, err := m.Create(ctx, cfg)
	if err != nil {
		return 0, "", err
	}
	defer m.Delete(ctx, info.ID)
	if err := runCell(ctx, m, info.ID, "print(sum(range(10)))", "45\n"); err != nil {
		return 0, "", err
	}
	return time.Since(start), info.StartedFrom, nil
}

// benchImage is the bench's image: the fixture's root layer, and a config
// with labels.
func benchImage(l1 v1.Layer, labels map[string]string) (v1.Image, error) {
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{Architecture: "amd64", OS: "linux",
		Config: v1.Config{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, Labels: labels}})
	if err != nil {
		return nil, err
	}
	return mutate.AppendLayers(img, l1)
}

// imageBytes is what a pull of img fetches: manifest, config and layers.
func imageBytes(img v1.Image) (int64, error) {
	n, err := img.Size()
	if err != nil {
		return 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	n += m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// stepClock records when each step of an image's making started.
type stepClock struct {
	mu    sync.Mutex
	start time.Time
	steps []string
	at    []time.Duration
}

func (s *stepClock) add(e sandbox.ImageEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Step == "" || e.Message != "" || e.Done != 0 || len(s.steps) > 0 && s.steps[len(s.steps)-1] == e.Step {
		return
	}
	s.steps = append(s.steps, e.Step)
	s.at = append(s.at, time.Since(s.start))
}

// String lists the steps with their durations.
func (s *stepClock) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := time.Since(s.start)
	var parts []string
	for i, step := range s.steps {
		end := total
		if i+1 < len(s.at) {
			end = s.at[i+1]
		}
		parts = append(parts, fmt.Sprintf("%s %.1fs", step, (end-s.at[i]).Seconds()))
	}
	if len(parts) == 0 {
		return "no step events"
	}
	return strings.Join(parts, ", ")
}

// benchFetcher is the daemon's registry client as the operator has it
// (cmd/cellvm's ociFetcher): package image/oci into the engine's hook.
type benchFetcher struct{}

func (benchFetcher) Pull(ctx context.Context, ref string, o engine.FetchOptions) (*engine.FetchedImage, error) {
	im, err := oci.Pull(ctx, ref, benchOCIOptions(o))
	return engine.FromOCI(ctx, im, err)
}

func (benchFetcher) Import(ctx context.Context, r io.Reader, o engine.FetchOptions) (*engine.FetchedImage, error) {
	im, err := oci.Import(ctx, r, benchOCIOptions(o))
	return engine.FromOCI(ctx, im, err)
}

func benchOCIOptions(o engine.FetchOptions) oci.Options {
	return oci.Options{Platform: o.Platform, Insecure: o.Insecure, Token: o.Token, MaxImageBytes: o.MaxBytes,
		TempDir: o.TempDir, Progress: o.Progress, Keychain: authn.NewMultiKeychain()}
}
