package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

func importOptions(t *testing.T) Options {
	o := testOptions()
	o.TempDir = t.TempDir()
	return o
}

func dockerSaveOf(t *testing.T, imgs map[string]v1.Image) []byte {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for r, img := range imgs {
		ref, err := name.ParseReference(r)
		if err != nil {
			t.Fatal(err)
		}
		refs[ref] = img
	}
	var b bytes.Buffer
	if err := tarball.MultiRefWrite(refs, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// layoutTarOf writes the images (each with a ref.name annotation) or an
// index as an OCI layout and tars it.
func layoutTarOf(t *testing.T, add func(p layout.Path)) []byte {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	add(p)
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		info, _ := d.Info()
		hdr, _ := tar.FileInfoHeader(info, "")
		hdr.Name = rel
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tw.Write(data)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	return b.Bytes()
}

func checkImported(t *testing.T, im *Image, img v1.Image, layers [][]byte, digest string) {
	t.Helper()
	if im.Ref != "" || im.Digest != digest {
		t.Errorf("Ref %q Digest %q; want \"\" %q", im.Ref, im.Digest, digest)
	}
	want := buildplan.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv", User: "1000:1000"}
	if !reflect.DeepEqual(im.Config, want) {
		t.Errorf("Config %+v, want %+v", im.Config, want)
	}
	ls, _ := img.Layers()
	mts := []string{MediaTypeTarGzip, MediaTypeTarZstd, MediaTypeTar}
	if len(im.Layers) != len(ls) {
		t.Fatalf("%d layers, want %d", len(im.Layers), len(ls))
	}
	for i, l := range im.Layers {
		if l.Digest != mustDigest(t, ls[i]) || l.MediaType != mts[i] || l.Size != int64(len(layers[i])) {
			t.Errorf("layer %d: %+v; want %s %s %d", i, l, mustDigest(t, ls[i]), mts[i], len(layers[i]))
		}
	}
	for i, b := range readLayers(t, im) {
		if !bytes.Equal(b, layers[i]) {
			t.Errorf("layer %d differs", i)
		}
	}
}

func TestImportDockerSave(t *testing.T) {
	img, layers := craftedImage(t, nil)
	cfgName, _ := img.ConfigName()
	arch := dockerSaveOf(t, map[string]v1.Image{"team/app:1": img})
	for _, gz := range []bool{false, true} {
		o := importOptions(t)
		in := arch
		if gz {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(arch)
			zw.Close()
			in = b.Bytes()
		}
		var events []sandbox.ImageEvent
		o.Progress = func(ev sandbox.ImageEvent) { events = append(events, ev) }
		im, err := Import(context.Background(), bytes.NewReader(in), o)
		if err != nil {
			t.Fatal(err)
		}
		checkImported(t, im, img, layers, cfgName.String())
		if len(events) == 0 || events[0].Step != sandbox.ImageStepRead || events[0].Done == 0 {
			t.Errorf("events %+v: want read progress", events)
		}
		if err := im.Close(); err != nil {
			t.Fatal(err)
		}
		assertEmptyDir(t, o.TempDir)
		if _, err := im.Open(context.Background(), 0); err == nil {
			t.Error("Open after Close worked")
		}
	}
}

func TestImportOCILayout(t *testing.T) {
	img, layers := craftedImage(t, nil)
	arch := layoutTarOf(t, func(p layout.Path) {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "app:1"})); err != nil {
			t.Fatal(err)
		}
	})
	o := importOptions(t)
	im, err := Import(context.Background(), bytes.NewReader(arch), o)
	if err != nil {
		t.Fatal(err)
	}
	checkImported(t, im, img, layers, mustDigest(t, img))
	im.Close()
	assertEmptyDir(t, o.TempDir)

	// A multi-platform index in the layout: linux/amd64 is taken.
	arm, _ := craftedImage(t, func(c *v1.ConfigFile) { c.Architecture = "arm64" })
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	arch = layoutTarOf(t, func(p layout.Path) {
		if err := p.AppendIndex(idx); err != nil {
			t.Fatal(err)
		}
	})
	im, err = Import(context.Background(), bytes.NewReader(arch), o)
	if err != nil {
		t.Fatal(err)
	}
	checkImported(t, im, img, layers, mustDigest(t, img))
	im.Close()
	assertEmptyDir(t, o.TempDir)

	// Only arm64: refused, naming what it has.
	arch = layoutTarOf(t, func(p layout.Path) {
		p.AppendImage(arm, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "arm64"}))
	})
	_, err = Import(context.Background(), bytes.NewReader(arch), o)
	wantErr(t, err, sandbox.ErrInvalid, "no linux/amd64 image", "linux/arm64")
	assertEmptyDir(t, o.TempDir)
}

func TestImportRandomImages(t *testing.T) {
	img, err := random.Image(2048, 4)
	if err != nil {
		t.Fatal(err)
	}
	o := importOptions(t)
	for _, arch := range [][]byte{
		dockerSaveOf(t, map[string]v1.Image{"r:1": img}),
		layoutTarOf(t, func(p layout.Path) { p.AppendImage(img) }),
	} {
		im, err := Import(context.Background(), bytes.NewReader(arch), o)
		if err != nil {
			t.Fatal(err)
		}
		readLayers(t, im)
		im.Close()
		assertEmptyDir(t, o.TempDir)
	}
}

func TestImportRefusals(t *testing.T) {
	ctx := context.Background()
	img, _ := craftedImage(t, nil)
	other, _ := craftedImage(t, func(c *v1.ConfigFile) { c.Config.User = "other" })
	save := dockerSaveOf(t, map[string]v1.Image{"team/app:1": img})
	lay := layoutTarOf(t, func(p layout.Path) { p.AppendImage(img) })
	o := importOptions(t)
	try := func(what string, arch []byte, o Options, sentinel error, says ...string) {
		t.Helper()
		im, err := Import(ctx, bytes.NewReader(arch), o)
		if err == nil {
			im.Close()
		}
		t.Run(what, func(t *testing.T) { wantErr(t, err, sentinel, says...) })
		assertEmptyDir(t, o.TempDir)
	}

	// Truncated anywhere: refused, nothing left.
	for _, arch := range [][]byte{save, lay} {
		for _, cut := range []int{1, 100, 513, len(arch) / 3, len(arch) / 2, len(arch) - 2048} {
			try(fmt.Sprintf("cut at %d", cut), arch[:cut], o, sandbox.ErrInvalid)
		}
	}
	try("truncated says so", save[:len(save)/2+7], o, sandbox.ErrInvalid, "truncated")
	try("empty", nil, o, sandbox.ErrInvalid, "not a docker save tarball or an OCI layout")
	try("not a tar", bytes.Repeat([]byte("garbage!"), 200), o, sandbox.ErrInvalid, "not a tar archive")
	try("tar of something else", tarOf(t, "README", "hi"), o, sandbox.ErrInvalid, "not a docker save tarball or an OCI layout")

	try("two images, docker save", dockerSaveOf(t, map[string]v1.Image{"a:1": img, "b:2": other}), o, sandbox.ErrInvalid, "holds 2 images", "a:1", "b:2")
	two := layoutTarOf(t, func(p layout.Path) {
		p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "one"}))
		p.AppendImage(other, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "two"}))
	})
	try("two images, layout", two, o, sandbox.ErrInvalid, "holds 2 linux/amd64 images", "one (sha256:", "two (sha256:")

	// A corrupt layer, in either format.
	ls, _ := img.Layers()
	lc, _ := ls[1].Compressed()
	lb, _ := io.ReadAll(lc)
	try("corrupt layer, docker save", flipIn(t, save, lb), o, sandbox.ErrInvalid, "corrupt")
	try("corrupt layer, layout", flipIn(t, lay, lb), o, sandbox.ErrInvalid, "corrupt")
	cb, _ := img.RawConfigFile()
	try("corrupt config, docker save", flipIn(t, save, cb), o, sandbox.ErrInvalid, "corrupt")
	try("corrupt config, layout", flipIn(t, lay, cb), o, sandbox.ErrInvalid, "corrupt")

	small := o
	small.MaxLayerBytes = int64(len(lb)) - 1
	try("layer over the cap", save, small, sandbox.ErrTooLarge, "over the cap")
	try("layer over the cap, layout", lay, small, sandbox.ErrTooLarge, "over the cap")

	bad, _ := craftedImage(t, func(c *v1.ConfigFile) { c.Config.Env = []string{"A=1", "=x"} })
	try("bad env", dockerSaveOf(t, map[string]v1.Image{"x:1": bad}), o, sandbox.ErrInvalid, "env entry")

	try("duplicate entry", tarOf(t, "manifest.json", "[]", "manifest.json", "[]"), o, sandbox.ErrInvalid, "twice")
	try("bad manifest.json", tarOf(t, "manifest.json", "{"), o, sandbox.ErrInvalid, "manifest.json")

	o.Platform = "linux/arm64"
	try("platform", save, o, sandbox.ErrInvalid, "linux/amd64 only")
}

// flipIn returns arch with one byte of the first occurrence of part
// changed.
func flipIn(t *testing.T, arch, part []byte) []byte {
	t.Helper()
	i := bytes.Index(arch, part)
	if i < 0 {
		t.Fatal("part not in the archive")
	}
	out := append([]byte(nil), arch...)
	out[i+len(part)/2] ^= 0x01
	return out
}

// TestImportClassicDockerSave: docker's own format: uncompressed
// <id>/layer.tar files, a layer shared by a symlink, hostile names and
// links that point out of the archive.
func TestImportClassicDockerSave(t *testing.T) {
	l1 := tarOf(t, "etc/os-release", "ID=test\n")
	l2 := tarOf(t, "bin/sh", "#!")
	d1, d2 := sha(l1), sha(l2)
	cfg := fmt.Sprintf(`{"os":"linux","architecture":"amd64","config":{"Env":["PATH=/bin"],"WorkingDir":"/root"},"rootfs":{"type":"layers","diff_ids":["%s","%s","%s"]}}`, d1, d2, d1)
	cfgHex := strings.TrimPrefix(sha([]byte(cfg)), "sha256:")
	man, _ := json.Marshal([]dockerSave{{Config: cfgHex + ".json", RepoTags: []string{"test:1"}, Layers: []string{"aaa/layer.tar", "bbb/layer.tar", "ccc/layer.tar"}}})
	outside := t.TempDir()

	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	add := func(hdr *tar.Header, body []byte) {
		hdr.Size = int64(len(body))
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		hdr.Mode = 0o644
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(body)
	}
	add(&tar.Header{Name: "aaa/", Typeflag: tar.TypeDir}, nil)
	add(&tar.Header{Name: "aaa/layer.tar"}, l1)
	add(&tar.Header{Name: "bbb/layer.tar"}, l2)
	add(&tar.Header{Name: "ccc/layer.tar", Typeflag: tar.TypeSymlink, Linkname: "../aaa/layer.tar"}, nil)
	add(&tar.Header{Name: "../../" + filepath.Base(outside) + "/escaped"}, []byte("x"))
	add(&tar.Header{Name: filepath.Join(outside, "abs")}, []byte("x"))
	add(&tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, nil)
	add(&tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, nil)
	add(&tar.Header{Name: "./" + cfgHex + ".json"}, []byte(cfg))
	add(&tar.Header{Name: "manifest.json"}, man)
	tw.Close()

	o := importOptions(t)
	im, err := Import(context.Background(), bytes.NewReader(b.Bytes()), o)
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != "sha256:"+cfgHex || im.Config.WorkingDir != "/root" || len(im.Layers) != 3 {
		t.Errorf("got %+v", im)
	}
	for i, want := range []Layer{{d1, MediaTypeTar, int64(len(l1))}, {d2, MediaTypeTar, int64(len(l2))}, {d1, MediaTypeTar, int64(len(l1))}} {
		if im.Layers[i] != want {
			t.Errorf("layer %d: %+v, want %+v", i, im.Layers[i], want)
		}
	}
	got := readLayers(t, im)
	if !bytes.Equal(got[0], l1) || !bytes.Equal(got[1], l2) || !bytes.Equal(got[2], l1) {
		t.Error("layers differ")
	}
	// Nothing the archive named landed anywhere but the spool.
	assertEmptyDir(t, outside)
	ents, _ := os.ReadDir(o.TempDir)
	if len(ents) != 1 {
		t.Fatalf("temp dir holds %d entries, want the spool", len(ents))
	}
	spooled, _ := os.ReadDir(filepath.Join(o.TempDir, ents[0].Name()))
	for _, e := range spooled {
		if !e.Type().IsRegular() {
			t.Errorf("spool holds %s, not a regular file", e.Name())
		}
	}
	if len(spooled) != 2 {
		t.Errorf("spool keeps %d files, want the 2 layers", len(spooled))
	}
	im.Close()
	assertEmptyDir(t, o.TempDir)

	// A layer that does not match its diff_id.
	bad := bytes.Replace(b.Bytes(), []byte("#!"), []byte("#?"), 1)
	_, err = Import(context.Background(), bytes.NewReader(bad), o)
	wantErr(t, err, sandbox.ErrInvalid, "layer 2", "corrupt")
	assertEmptyDir(t, o.TempDir)
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func TestVerifier(t *testing.T) {
	data := []byte("some layer bytes")
	d := sha(data)
	for _, c := range []struct {
		name string
		in   []byte
		says string
	}{
		{"ok", data, ""},
		{"flipped", append([]byte("S"), data[1:]...), "does not match its digest"},
		{"short", data[:5], "ended after 5 of its 16 bytes"},
		{"long", append(append([]byte(nil), data...), 'x'), "longer than its 16 bytes"},
	} {
		v := newVerifier(context.Background(), io.NopCloser(bytes.NewReader(c.in)), d, int64(len(data)), "layer 1", sandbox.ErrUpstream)
		got, err := io.ReadAll(v)
		if c.says == "" {
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s: %q, %v", c.name, got, err)
			}
			continue
		}
		wantErr(t, err, sandbox.ErrUpstream, "layer 1", c.says)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := io.ReadAll(newVerifier(ctx, io.NopCloser(bytes.NewReader(data)), d, int64(len(data)), "layer 1", sandbox.ErrUpstream))
	if err == nil || !strings.Contains(err.Error(), "canceled") {
		t.Errorf("cancelled: %v", err)
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	img, _ := craftedImage(t, nil)
	o := importOptions(t)
	_, err := Import(ctx, bytes.NewReader(dockerSaveOf(t, map[string]v1.Image{"a:1": img})), o)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("import: %v, want context.Canceled", err)
	}
	assertEmptyDir(t, o.TempDir)
	reg := newRegistry(t, nil)
	ref := reg.push(t, "a/b:1", img)
	_, err = Pull(ctx, ref, testOptions())
	if !errors.Is(err, context.Canceled) || errors.Is(err, sandbox.ErrUpstream) {
		t.Errorf("pull: %v, want context.Canceled", err)
	}
}
