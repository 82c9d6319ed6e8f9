package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// requireAuth answers 401 to anything under /v2/private/, as a registry
// does to a caller without credentials (whether the image is there or not).
func requireAuth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v2/private/") && r.Header.Get("Authorization") == "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="cellvm-test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// imageErrors are the sentinels behind the API's statuses for an image
// request.
var imageErrors = map[int]error{400: sandbox.ErrInvalid, 409: sandbox.ErrBusy, 413: sandbox.ErrTooLarge, 422: sandbox.ErrBuildFailed, 502: sandbox.ErrUpstream}

// wantImageError fails t unless err is the API's error with that status
// (or wraps its sentinel, for a client that maps statuses back).
func wantImageError(t *testing.T, what string, err error, status int) {
	t.Helper()
	var e *api.Error
	if errors.As(err, &e) && e.Status == status || imageErrors[status] != nil && errors.Is(err, imageErrors[status]) {
		return
	}
	t.Errorf("%s: %v; want HTTP %d (%v)", what, err, status, imageErrors[status])
}

// closedPort is a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// armOnlyIndex is a multi-platform index whose only manifest is for
// linux/arm64.
func armOnlyIndex(t *testing.T) v1.ImageIndex {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{Architecture: "arm64", OS: "linux", Config: v1.Config{Env: []string{"PATH=/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.AppendLayers(img, tarLayer(t, []tarEntry{fileEntry("hello.txt", "arm64 only\n", 0o644)}))
	if err != nil {
		t.Fatal(err)
	}
	return mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
}

// bigImage is an OCI image with one uncompressed layer holding mib MiB
// that do not compress.
func bigImage(t *testing.T, mib int) v1.Image {
	t.Helper()
	buf := make([]byte, mib<<20)
	rand.NewChaCha8([32]byte{1}).Read(buf)
	layer := static.NewLayer(tarBytes(t, []tarEntry{fileEntry("big.bin", string(buf), 0o644)}), types.OCIUncompressedLayer)
	img := mutate.MediaType(ociImage(t, v1.Config{Env: []string{"PATH=/bin"}}, layer), types.OCIManifestSchema1)
	return mutate.ConfigMediaType(img, types.OCIConfigJSON)
}

// corruptArchive returns the docker-save tarball at p with one byte of
// its largest member (a layer) flipped, so its digest no longer matches.
func corruptArchive(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var biggest *tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if biggest == nil || h.Size > biggest.Size {
			biggest = h
		}
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr = tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		body, _ := io.ReadAll(tr)
		if h.Name == biggest.Name {
			body[len(body)/2] ^= 0xff
		}
		tw.WriteHeader(h)
		tw.Write(body)
	}
	tw.Close()
	return out.Bytes()
}

// TestImageBadInputs, through the API (and the CLI for some): each bad
// input the issue names is a clear error and leaves nothing behind (no
// file in the daemon's state directory, no VMM process, no loop device):
// a registry answering 404 or 401, or unreachable (502, naming the ref); a
// manifest for another platform only; a truncated or corrupt archive
// (400); a layer bigger than --max-image-mib (413); a taken name without
// replace (409, the image kept; with replace it is made); an image whose
// unpacked size exceeds the builder's disk (--image-build-disk-mib: a
// failed extract, 422); a build past its deadline and a build past its
// memory (--image-build-memory-mib) are killed.
func TestImageBadInputs(t *testing.T) {
	kvmtest.Require(t)
	ctx := context.Background()
	reg := startRegistry(t, requireAuth)
	dir := t.TempDir()
	bbox := saveImage(t, dir, "busybox:rig", busyboxImage(t))

	t.Run("registry", func(t *testing.T) {
		d := startDaemon(t, t.TempDir(), "--network=false", "--max-image-mib", "48")
		defer func() { d.stop(t) }()
		c := api.NewClient(d.socket)
		armRef := reg + "/armonly:1"
		r, err := name.ParseReference(armRef, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.WriteIndex(r, armOnlyIndex(t)); err != nil {
			t.Fatal(err)
		}
		bigRef := reg + "/big:1"
		pushImage(t, bigRef, bigImage(t, 64))
		for _, tc := range []struct {
			what, ref string
			status    int
		}{
			{"a tag the registry does not have (404)", reg + "/nosuch:1", 502},
			{"a registry that wants credentials (401)", reg + "/private/img:1", 502},
			{"an unreachable registry", closedPort(t) + "/img:1", 502},
			{"an index with linux/arm64 only", armRef, 0},
			{"a layer bigger than --max-image-mib", bigRef, 413},
		} {
			left := snapshotLeftovers(t, d.state)
			_, err := c.CreateImage(ctx, sandbox.ImageRequest{Name: "bad", Pull: tc.ref, Insecure: true}, nil)
			t.Logf("%s: %v", tc.what, err)
			if tc.status != 0 {
				wantImageError(t, tc.what, err, tc.status)
			} else if err == nil || !strings.Contains(err.Error(), "arm64") && !strings.Contains(err.Error(), "amd64") {
				t.Errorf("%s: %v; want an error naming the platforms", tc.what, err)
			}
			if err != nil && tc.status != 413 && !strings.Contains(err.Error(), tc.ref) {
				t.Errorf("%s: the error does not name the ref %s: %v", tc.what, tc.ref, err)
			}
			if _, ok := imageNamed(t, c, "bad"); ok {
				t.Errorf("%s left an image", tc.what)
			}
			left.check(t, tc.what)
		}
		// The CLI says so too, naming the ref, with a failing exit code.
		res := cellvmCLI(t, d.socket, time.Minute, "image", "pull", reg+"/nosuch:1", "--name", "bad", "--insecure")
		if res.code == 0 || !strings.Contains(res.stderr, reg+"/nosuch:1") {
			t.Errorf("cellvm image pull of a missing tag: exit %d, %s; want a failure naming the ref", res.code, res.stderr)
		}
	})

	t.Run("archive", func(t *testing.T) {
		d := startDaemon(t, t.TempDir(), "--network=false")
		defer func() { d.stop(t) }()
		c := api.NewClient(d.socket)
		whole, err := os.ReadFile(bbox)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			what string
			body []byte
		}{
			{"a truncated archive", whole[:len(whole)/2]},
			{"an archive with a corrupt layer", corruptArchive(t, bbox)},
			{"not an archive", []byte("this is no tar\n")},
		} {
			left := snapshotLeftovers(t, d.state)
			_, err := c.CreateImage(ctx, sandbox.ImageRequest{Name: "bad", Import: true, Archive: bytes.NewReader(tc.body)}, nil)
			t.Logf("%s: %v", tc.what, err)
			wantImageError(t, tc.what, err, 400)
			left.check(t, tc.what)
		}

		// A taken name: refused without replace, the image kept; made
		// again with it.
		if res := cellvmCLI(t, d.socket, buildTimeout, "image", "import", bbox, "--name", "taken"); res.code != 0 {
			t.Fatalf("cellvm image import: exit %d\n%s", res.code, res.stderr)
		}
		first, _ := imageNamed(t, c, "taken")
		left := snapshotLeftovers(t, d.state)
		f, err := os.Open(bbox)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.CreateImage(ctx, sandbox.ImageRequest{Name: "taken", Import: true, Archive: f}, nil)
		f.Close()
		wantImageError(t, "an import onto a taken name", err, 409)
		left.check(t, "an import onto a taken name")
		if res := cellvmCLI(t, d.socket, time.Minute, "image", "import", bbox, "--name", "taken"); res.code == 0 {
			t.Errorf("cellvm image import onto a taken name without --replace: exit 0")
		}
		if now, _ := imageNamed(t, c, "taken"); now.Digest != first.Digest || now.BuiltAt != first.BuiltAt {
			t.Errorf("the refused import changed the image: %+v, was %+v", now, first)
		}
		if res := cellvmCLI(t, d.socket, buildTimeout, "image", "import", bbox, "--name", "taken", "--replace"); res.code != 0 {
			t.Errorf("cellvm image import --replace: exit %d\n%s", res.code, res.stderr)
		}
	})

	t.Run("disk", func(t *testing.T) {
		d := startDaemon(t, t.TempDir(), "--network=false", "--image-build-disk-mib", "64")
		defer func() { d.stop(t) }()
		c := api.NewClient(d.socket)
		ref := reg + "/pyslim:disk"
		pushImage(t, ref, slimImage(t, slimLayer1(t), nil)) // about 150 MiB unpacked
		left := snapshotLeftovers(t, d.state)
		_, err := c.CreateImage(ctx, sandbox.ImageRequest{Name: "toobig", Pull: ref, Insecure: true}, nil)
		t.Logf("an image larger than the builder's disk: %v", err)
		wantImageError(t, "an image larger than the builder's disk", err, 422)
		var se *sandbox.ImageStepError
		if !errors.As(err, &se) || se.Step != sandbox.ImageStepExtract {
			t.Errorf("an image larger than the builder's disk: %v; want a failed step %q", err, sandbox.ImageStepExtract)
		}
		left.check(t, "an image larger than the builder's disk")
	})

	t.Run("killed", func(t *testing.T) {
		d := startDaemon(t, t.TempDir(), "--network=false", "--image-build-memory-mib", "256")
		defer func() { d.stop(t) }()
		c := api.NewClient(d.socket)
		const deadline = 90 * time.Second
		left := snapshotLeftovers(t, d.state)
		start := time.Now()
		_, err := c.CreateImage(ctx, sandbox.ImageRequest{Name: "slow", Timeout: deadline,
			Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{{Run: "sleep 3600"}}}}, nil)
		took := time.Since(start)
		t.Logf("a build past its deadline: %v after %.1f s", err, took.Seconds())
		if err == nil || took > deadline+2*time.Minute {
			t.Errorf("a build of sleep 3600 with a %v deadline: %v after %v; want it killed at its deadline", deadline, err, took)
		}
		if _, ok := imageNamed(t, c, "slow"); ok {
			t.Error("the build past its deadline left an image")
		}
		left.check(t, "a build past its deadline")

		left = snapshotLeftovers(t, d.state)
		_, err = c.CreateImage(ctx, sandbox.ImageRequest{Name: "hungry",
			Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{{Run: `python3 -c "b = b'x' * (1 << 30); print(len(b))"`}}}}, nil)
		t.Logf("a build past its memory: %v", err)
		var se *sandbox.ImageStepError
		if !errors.As(err, &se) || se.Step != sandbox.ImageStepRun {
			t.Errorf("a build that allocates 1 GiB in a 256 MiB builder: %v; want its run step failed", err)
		}
		if _, ok := imageNamed(t, c, "hungry"); ok {
			t.Error("the build past its memory left an image")
		}
		left.check(t, "a build past its memory")
	})
}
