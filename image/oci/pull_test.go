package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

func TestPullCraftedImage(t *testing.T) {
	reg := newRegistry(t, nil)
	img, layers := craftedImage(t, nil)
	ref := reg.push(t, "team/app:1", img)

	var mu sync.Mutex
	var events []sandbox.ImageEvent
	o := testOptions()
	o.Progress = func(ev sandbox.ImageEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	im, err := Pull(context.Background(), ref, o)
	if err != nil {
		t.Fatal(err)
	}
	defer im.Close()
	if im.Ref != ref || im.Digest != mustDigest(t, img) || im.IndexDigest != "" {
		t.Errorf("Ref %q Digest %q IndexDigest %q; want %q %q", im.Ref, im.Digest, im.IndexDigest, ref, mustDigest(t, img))
	}
	want := buildplan.Config{Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}, WorkingDir: "/srv", User: "1000:1000"}
	if !reflect.DeepEqual(im.Config, want) {
		t.Errorf("Config %+v, want %+v", im.Config, want)
	}
	mts := []string{MediaTypeTarGzip, MediaTypeTarZstd, MediaTypeTar}
	ls, _ := img.Layers()
	if len(im.Layers) != 3 {
		t.Fatalf("%d layers, want 3", len(im.Layers))
	}
	for i, l := range im.Layers {
		if l.Digest != mustDigest(t, ls[i]) || l.MediaType != mts[i] || l.Size != int64(len(layers[i])) {
			t.Errorf("layer %d: %+v; want %s %s %d", i, l, mustDigest(t, ls[i]), mts[i], len(layers[i]))
		}
		if p := l.Plan("layers/0"); p.Digest != l.Digest || p.File != "layers/0" || p.MediaType != l.MediaType || p.Size != l.Size {
			t.Errorf("Plan: %+v", p)
		}
	}
	got := readLayers(t, im)
	for i := range got {
		if !bytes.Equal(got[i], layers[i]) {
			t.Errorf("layer %d: read %d bytes, not the %d pushed", i, len(got[i]), len(layers[i]))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[0].Message == "" || !strings.Contains(events[0].Message, im.Digest) {
		t.Errorf("first event %+v: want a line naming the digest", events)
	}
	last := events[len(events)-1]
	if last.Step != sandbox.ImageStepFetch || last.Done != im.Size() || last.Total != im.Size() {
		t.Errorf("last event %+v; want fetch done %d of %d", last, im.Size(), im.Size())
	}

	// By digest, the same image.
	im2, err := Pull(context.Background(), reg.host+"/team/app@"+im.Digest, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if im2.Digest != im.Digest || !reflect.DeepEqual(im2.Layers, im.Layers) {
		t.Errorf("by digest: %+v, want %+v", im2, im)
	}
}

func TestPullRandomImageAndIndex(t *testing.T) {
	reg := newRegistry(t, nil)
	img, err := random.Image(4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	ref := reg.push(t, "r/random:latest", img)
	im, err := Pull(context.Background(), ref, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	readLayers(t, im)

	// A multi-platform index with linux/amd64 among others.
	arm, _ := craftedImage(t, func(c *v1.ConfigFile) { c.Architecture = "arm64" })
	amd, _ := craftedImage(t, func(c *v1.ConfigFile) { c.Config.Env = append(c.Config.Env, "AMD=1") })
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
	)
	ref = reg.push(t, "r/multi:1", idx)
	im, err = Pull(context.Background(), ref, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != mustDigest(t, amd) || im.IndexDigest != mustDigest(t, idx) {
		t.Errorf("Digest %s IndexDigest %s; want %s %s", im.Digest, im.IndexDigest, mustDigest(t, amd), mustDigest(t, idx))
	}
	if e := im.Config.Env; e[len(e)-1] != "AMD=1" {
		t.Errorf("took the wrong image: env %v", e)
	}
}

func TestPullRefusals(t *testing.T) {
	reg := newRegistry(t, nil)
	ctx := context.Background()

	arm, _ := craftedImage(t, func(c *v1.ConfigFile) { c.Architecture = "arm64" })
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}}},
	)
	ref := reg.push(t, "r/armonly:1", idx)
	_, err := Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrInvalid, ref, "has no linux/amd64 image; it has: linux/arm64, linux/arm/v7")

	ref = reg.push(t, "r/arm:1", arm)
	_, err = Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrInvalid, ref, "linux/arm64 image")

	for _, c := range []struct {
		name string
		edit func(*v1.ConfigFile)
		says string
	}{
		{"env", func(c *v1.ConfigFile) { c.Config.Env = []string{"1BAD=x"} }, "env entry"},
		{"user", func(c *v1.ConfigFile) { c.Config.User = "root; rm -rf /" }, "User"},
		{"workdir", func(c *v1.ConfigFile) { c.Config.WorkingDir = "srv" }, "WorkingDir"},
	} {
		img, _ := craftedImage(t, c.edit)
		ref := reg.push(t, "r/bad-"+c.name+":1", img)
		_, err := Pull(ctx, ref, testOptions())
		wantErr(t, err, sandbox.ErrInvalid, ref, c.says)
	}

	// A foreign layer: refused before anything is fetched.
	img, _ := craftedImage(t, nil)
	img, err = mutate.AppendLayers(img, static.NewLayer([]byte("windows"), types.DockerForeignLayer))
	if err != nil {
		t.Fatal(err)
	}
	ref = reg.push(t, "r/foreign:1", img)
	_, err = Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrInvalid, ref, "foreign")

	// Not an image: an artifact's config.
	art := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), "application/vnd.cncf.helm.config.v1+json")
	art, _ = mutate.AppendLayers(art, static.NewLayer([]byte("chart"), types.OCILayer))
	ref = reg.push(t, "r/chart:1", art)
	_, err = Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrInvalid, ref, "not a container image")

	for _, bad := range []string{"UPPER/case", "a b", "", "x@sha256:12", strings.Repeat("a", 600)} {
		_, err := Pull(ctx, bad, testOptions())
		wantErr(t, err, sandbox.ErrInvalid)
	}
	o := testOptions()
	o.Platform = "linux/arm64"
	_, err = Pull(ctx, ref, o)
	wantErr(t, err, sandbox.ErrInvalid, "linux/amd64 only")
}

func TestPullRegistryErrors(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, nil)
	ref := reg.host + "/no/such:tag"
	_, err := Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrUpstream, ref, "no such image", "404")

	// Unreachable: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = Pull(ctx, addr+"/x/y:1", testOptions())
	wantErr(t, err, sandbox.ErrUpstream, addr+"/x/y:1", "refused")

	// A registry that wants a token, and echoes what it was sent.
	const token = "s3cret-t0ken"
	authReg := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				msg, _ := json.Marshal("no entry for " + r.Header.Get("Authorization"))
				fmt.Fprintf(w, `{"errors":[{"code":"UNAUTHORIZED","message":%s}]}`, msg)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	img, _ := craftedImage(t, nil)
	// Push straight to the inner registry's storage through the token.
	ref = pushWithToken(t, authReg, "private/app:1", img, token)
	_, err = Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrUpstream, ref, "refused access", "401", "UNAUTHORIZED")
	o := testOptions()
	o.Token = "wrong-" + token
	_, err = Pull(ctx, ref, o)
	wantErr(t, err, sandbox.ErrUpstream, ref, "refused access")
	if strings.Contains(err.Error(), token) {
		t.Errorf("the error shows the token: %v", err)
	}
	o.Token = token
	im, err := Pull(ctx, ref, o)
	if err != nil {
		t.Fatal(err)
	}
	readLayers(t, im)

	// 403.
	denyReg := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				io.WriteString(w, `{"errors":[{"code":"DENIED","message":"pull access denied"}]}`)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	ref = denyReg.push(t, "d/app:1", img)
	_, err = Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrUpstream, ref, "denied", "pull access denied")
}

func pushWithToken(t *testing.T, r *testRegistry, repoTag string, img v1.Image, token string) string {
	t.Helper()
	return pushWith(t, r, repoTag, img, &bearer{token: token})
}

type bearer struct{ token string }

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func TestPullCaps(t *testing.T) {
	ctx := context.Background()
	reg := newRegistry(t, nil)
	img, layers := craftedImage(t, nil)
	ref := reg.push(t, "r/big:1", img)
	o := testOptions()
	o.MaxLayerBytes = int64(len(layers[1])) - 1
	before := len(reg.requests())
	_, err := Pull(ctx, ref, o)
	wantErr(t, err, sandbox.ErrTooLarge, ref, "layer 2 (sha256:", "over the cap")
	ls, _ := img.Layers()
	for _, q := range reg.requests()[before:] {
		for _, l := range ls {
			if strings.Contains(q, mustDigest(t, l)) {
				t.Errorf("fetched a layer of an image over the cap: %s", q)
			}
		}
	}
	o = testOptions()
	o.MaxImageBytes = int64(len(layers[0]) + len(layers[1]))
	_, err = Pull(ctx, ref, o)
	wantErr(t, err, sandbox.ErrTooLarge, ref, "over the cap")

	// A manifest over MaxMetadataBytes is refused, not read whole.
	bigReg := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/manifests/huge") {
				w.Header().Set("Content-Type", ociManifest)
				w.Write([]byte(`{"schemaVersion":2,"layers":[`))
				w.Write(bytes.Repeat([]byte(" "), MaxMetadataBytes+10))
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	_, err = Pull(ctx, bigReg.host+"/x/y:huge", testOptions())
	wantErr(t, err, sandbox.ErrInvalid, "over")
}

func TestPullCorruptBlobs(t *testing.T) {
	ctx := context.Background()
	img, layers := craftedImage(t, nil)
	ls, _ := img.Layers()
	target := mustDigest(t, ls[1])
	cfgName, _ := img.ConfigName()

	corrupt := func(digest string, body func([]byte) []byte) func(http.Handler) http.Handler {
		return func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/blobs/"+digest) {
					rec := &recorder{header: http.Header{}}
					h.ServeHTTP(rec, r)
					b := body(rec.body.Bytes())
					w.Header().Set("Content-Length", fmt.Sprint(len(b)))
					w.WriteHeader(http.StatusOK)
					w.Write(b)
					return
				}
				h.ServeHTTP(w, r)
			})
		}
	}
	flip := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		b[len(b)/2] ^= 0xff
		return b
	}
	for _, c := range []struct {
		name string
		body func([]byte) []byte
	}{
		{"flipped", flip},
		{"longer", func(b []byte) []byte { return append(append([]byte(nil), b...), 'x') }},
		{"shorter", func(b []byte) []byte { return b[:len(b)-1] }},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := newRegistry(t, corrupt(target, c.body))
			ref := reg.push(t, "r/corrupt:1", img)
			im, err := Pull(ctx, ref, testOptions())
			if err != nil {
				t.Fatal(err) // the manifest and config are fine
			}
			if b := readLayers(t, &Image{Layers: im.Layers[:1], open: im.open}); !bytes.Equal(b[0], layers[0]) {
				t.Error("layer 1 differs")
			}
			rc, err := im.Open(ctx, 1)
			if err == nil {
				_, err = io.ReadAll(rc)
				rc.Close()
			}
			wantErr(t, err, sandbox.ErrUpstream, ref, "layer 2")
		})
	}

	reg := newRegistry(t, corrupt(cfgName.String(), flip))
	ref := reg.push(t, "r/badconfig:1", img)
	_, err := Pull(ctx, ref, testOptions())
	wantErr(t, err, sandbox.ErrUpstream, ref, "config")

	// A manifest fetched by digest must hash to it.
	reg = newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/sha256:") {
				rec := &recorder{header: http.Header{}}
				h.ServeHTTP(rec, r)
				b := append(rec.body.Bytes(), ' ')
				w.Header().Set("Content-Type", rec.header.Get("Content-Type"))
				w.Write(b)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	reg.push(t, "r/m:1", img)
	_, err = Pull(ctx, reg.host+"/r/m@"+mustDigest(t, img), testOptions())
	wantErr(t, err, sandbox.ErrUpstream, "r/m@sha256:")
}

type recorder struct {
	header http.Header
	body   bytes.Buffer
	code   int
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// A registry that calls every manifest application/json: the manifest's
// own mediaType decides.
func TestPullPlainJSONContentType(t *testing.T) {
	reg := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
				rec := &recorder{header: http.Header{}}
				h.ServeHTTP(rec, r)
				w.Header().Set("Content-Type", "application/json")
				w.Write(rec.body.Bytes())
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	img, _ := craftedImage(t, nil)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
	for _, x := range []any{img, idx} {
		ref := reg.push(t, "p/j:1", x)
		im, err := Pull(context.Background(), ref, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		if im.Digest != mustDigest(t, img) {
			t.Errorf("digest %s", im.Digest)
		}
	}
}
