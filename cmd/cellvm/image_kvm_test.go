package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// The image the rig's image test boots, built on the host before the rig
// starts (test/nested/build-kvm-tests.sh runs `cellvm image build rigImage
// --apt jq --images-dir build/rig/images`): the rig's L1 has no Debian
// mirror, and the host builds it in seconds, cached by its inputs.
const (
	rigImage     = "rig-jq"
	rigImagesDir = "rig/images"
)

// TestImageBuiltWithApt, through the API of a jailed daemon: a sandbox of
// the image `cellvm image build --apt jq` made has Debian's jq, installed
// by dpkg and working, and its image marker names the build; a sandbox of
// the default image has no jq; GET /v1/images lists the image with its
// packages and key; an image that is not there is a 400 naming those that
// are; the image cannot be deleted while its sandbox runs.
func TestImageBuiltWithApt(t *testing.T) {
	kvmtest.Require(t)
	images := filepath.Dir(kvmtest.BuildFile(t, filepath.Join(rigImagesDir, rigImage, store.ImageFile)))
	images = filepath.Dir(images)
	rec, err := store.ReadRecord(filepath.Join(images, rigImage))
	if err != nil || !slices.Contains(rec.Apt, "jq") {
		t.Fatalf("%s's build record: %+v, %v; want a build with --apt jq (build-kvm-tests.sh makes it)", rigImage, rec, err)
	}
	d := startDaemon(t, t.TempDir(), "--network=false", "--images-dir", images)
	defer func() { d.stop(t) }()
	c := api.NewClient(d.socket)
	ctx := context.Background()

	list, err := c.Images(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var got sandbox.ImageInfo
	for _, im := range list {
		names = append(names, im.Name)
		if im.Name == rigImage {
			got = im
		}
	}
	if len(list) < 2 || list[0].Name != sandbox.DefaultImage || got.Key != rec.Key || !slices.Contains(got.Apt, "jq") || got.Python == "" || got.SizeBytes <= 0 {
		t.Errorf("GET /v1/images: %+v; want the default first and %s with its key %s, apt [jq] and its manifest's Python", list, rigImage, rec.Key[:12])
	}
	_, err = c.Create(ctx, sandbox.Config{Image: "no-such-image"})
	wantAPIStatus(t, "an unknown image", err, 400)
	if err == nil || !strings.Contains(err.Error(), strings.Join(names, ", ")) {
		t.Errorf("the refusal of an unknown image does not name the images (%s): %v", strings.Join(names, ", "), err)
	}

	probe := `import shutil, subprocess
jq = shutil.which('jq')
out = subprocess.run([jq, '-c', '.a'], input='{"a": [1, 2]}', capture_output=True, text=True).stdout.strip() if jq else None
dpkg = subprocess.run(['dpkg-query', '-W', '-f', '${Status}', 'jq'], capture_output=True, text=True).stdout
marker = open('/etc/cellvm-image').read()
(jq, out, dpkg, marker)`
	// The image is new to this L1: its first reads come over 9p from the
	// host, one guest block at a time once the VM runs. Read it once,
	// whole, into L1's page cache (9p cache=loose), as the default image
	// is by the tests before this one.
	start := time.Now()
	if f, err := os.Open(filepath.Join(images, rigImage, store.ImageFile)); err == nil {
		// Large reads (9p's msize), not a page each: a plain loop, since
		// io.Copy would choose its own small buffer here.
		buf := make([]byte, 1<<20)
		var n int64
		for {
			k, err := f.Read(buf)
			n += int64(k)
			if err != nil {
				break
			}
		}
		f.Close()
		t.Logf("read %s's %d MiB in %.1f s", rigImage, n>>20, time.Since(start).Seconds())
	}
	start = time.Now()
	sb, err := c.Create(ctx, sandbox.Config{Image: rigImage})
	if err != nil {
		t.Fatalf("create a sandbox of %s: %v", rigImage, err)
	}
	t.Logf("sandbox of %s up in %.1f s", rigImage, time.Since(start).Seconds())
	start = time.Now()
	r := mustCell(t, c, sb.ID, "1 + 1", 5*time.Minute)
	t.Logf("its first cell (the interpreter's start) answered in %.1f s: %s", time.Since(start).Seconds(), text(r))
	r = mustCell(t, c, sb.ID, probe, 2*time.Minute)
	t.Logf("in %s: %s", rigImage, text(r))
	if r.Status != cell.StatusOK || !strings.HasPrefix(text(r), "('/usr/bin/jq', '[1,2]', 'install ok installed', 'key "+rec.Key) ||
		!strings.Contains(text(r), "name "+rigImage) {
		t.Errorf("the built image's sandbox: %+v; want /usr/bin/jq that prints [1,2], installed by dpkg, and a marker naming key %s", r, rec.Key[:12])
	}
	wantAPIStatus(t, "delete of an image a sandbox uses", c.DeleteImage(ctx, rigImage), 409)

	def, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r = mustCell(t, c, def.ID, "import shutil, subprocess\n(shutil.which('jq'), subprocess.run(['dpkg-query', '-W', 'jq'], capture_output=True).returncode != 0)", 2*time.Minute)
	if r.Status != cell.StatusOK || text(r) != "(None, True)" {
		t.Errorf("the default image's sandbox: %+v; want no jq, and none known to dpkg", r)
	}
	if t.Failed() {
		return // the daemon's stop logs the sandboxes' consoles first
	}
	for _, id := range []string{sb.ID, def.ID} {
		if err := c.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	}
}
