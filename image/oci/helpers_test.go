package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var fastRetry = &remote.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1}

// testRegistry is ggcr's in-memory registry behind an httptest server;
// wrap, when set, sees every request first.
type testRegistry struct {
	host string
	mu   sync.Mutex
	reqs []string // "METHOD PATH"
}

func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) *testRegistry {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	tr := &testRegistry{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tr.mu.Lock()
		tr.reqs = append(tr.reqs, r.Method+" "+r.URL.Path)
		tr.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	tr.host = strings.TrimPrefix(srv.URL, "http://")
	return tr
}

func (r *testRegistry) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reqs...)
}

// push writes img (or an index) to the registry under repo:tag and
// returns the full reference.
func (r *testRegistry) push(t *testing.T, repoTag string, img any) string {
	t.Helper()
	return pushWith(t, r, repoTag, img, http.DefaultTransport)
}

func pushWith(t *testing.T, r *testRegistry, repoTag string, img any, rt http.RoundTripper) string {
	t.Helper()
	ref, err := name.ParseReference(r.host+"/"+repoTag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	switch x := img.(type) {
	case v1.Image:
		err = remote.Write(ref, x, remote.WithTransport(rt))
	case v1.ImageIndex:
		err = remote.WriteIndex(ref, x, remote.WithTransport(rt))
	}
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref.Name()
}

func testOptions() Options {
	return Options{Insecure: true, Keychain: authn.NewMultiKeychain(), retry: fastRetry}
}

// tarOf makes a tar archive of name -> content files.
func tarOf(t *testing.T, files ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i+1 < len(files); i += 2 {
		if err := tw.WriteHeader(&tar.Header{Name: files[i], Mode: 0o644, Size: int64(len(files[i+1])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[i+1]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// craftedImage is an image of three layers (OCI gzip, OCI zstd, OCI
// uncompressed; or Docker gzip for the second when docker is set) and a
// config with Env, WorkingDir and User.
func craftedImage(t *testing.T, cfgEdit func(*v1.ConfigFile)) (v1.Image, [][]byte) {
	t.Helper()
	raw := [][]byte{
		tarOf(t, "etc/hello", "hello\n"),
		tarOf(t, "usr/bin/tool", strings.Repeat("x", 70000)),
		tarOf(t, "srv/data", "data"),
	}
	open := func(b []byte) tarball.Opener {
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	l1, err := tarball.LayerFromOpener(open(raw[0]), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	l2, err := tarball.LayerFromOpener(open(raw[1]), tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	l3 := static.NewLayer(raw[2], types.OCIUncompressedLayer)
	img, err := mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), l1, l2, l3)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	cf.Config.WorkingDir = "/srv"
	cf.Config.User = "1000:1000"
	if cfgEdit != nil {
		cfgEdit(cf)
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	var compressed [][]byte
	ls, _ := img.Layers()
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		compressed = append(compressed, b)
	}
	return img, compressed
}

func mustDigest(t *testing.T, img interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// readLayers reads every layer of im through Open.
func readLayers(t *testing.T, im *Image) [][]byte {
	t.Helper()
	var out [][]byte
	for i := range im.Layers {
		rc, err := im.Open(context.Background(), i)
		if err != nil {
			t.Fatalf("Open(%d): %v", i, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("reading layer %d: %v", i, err)
		}
		out = append(out, b)
	}
	return out
}

func wantErr(t *testing.T, err, sentinel error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %v", sentinel)
	}
	t.Logf("error: %v", err)
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %q does not wrap %v", err, sentinel)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not say %q", err, p)
		}
	}
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind in the temp dir: %s", e.Name())
	}
}
