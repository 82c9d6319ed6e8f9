// Package oci is the host's side of an OCI image: it pulls one from a
// registry (Pull) or reads one from an archive a caller sent (Import: a
// `docker save` tarball or an OCI image layout as a tar), checks it, and
// hands its layers, still compressed, to the image builder.
//
// The host never unpacks a layer: it fetches or reads blobs, checks their
// digests and sizes, and streams them (Image.Open) into the builder VM's
// inputs disk, where the guest applies them (package image/buildplan).
// (A compressed layer of a `docker save` archive, which has no manifest
// to name its digest, is decompressed into a hash to check it against
// the config's diff_id: into a hash, never into files.)
// Everything a registry or an archive says is hostile: manifests, indexes
// and configs are bounded (MaxMetadataBytes), every digest is sha256 and
// checked against the bytes, layer sizes are checked against the caps
// before a byte is fetched and again while reading, and the image config
// (Env, WorkingDir, User) must pass the contract's checks or the image is
// refused (sandbox.ErrInvalid) rather than silently trimmed: an image
// whose config cellvm would change is not the image its owner asked for.
//
// Errors wrap the contract's sentinels: sandbox.ErrInvalid (a bad
// reference, no linux/amd64 image, a bad config or media type, a corrupt
// archive), sandbox.ErrUpstream (the registry cannot be reached, refuses
// access, has no such image, or sends content that does not match its
// digest), sandbox.ErrTooLarge (a layer or the image over the caps). A
// registry token never appears in an error.
package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

// Platform is the only platform the guest runs.
const Platform = "linux/amd64"

// Bounds.
const (
	// DefaultMaxLayerBytes caps one layer (compressed) when Options says 0.
	DefaultMaxLayerBytes = 8 << 30
	// DefaultMaxImageBytes caps all layers together when Options says 0.
	DefaultMaxImageBytes = 16 << 30
	// MaxMetadataBytes caps a manifest, an index, a config, an archive's
	// manifest.json or index.json.
	MaxMetadataBytes = 4 << 20
)

// Layer media types as Image.Layers gives them: whatever the registry or
// archive called a layer, it is handed on as one of these three, which
// say only its compression (buildplan.Layer.MediaType).
const (
	MediaTypeTar     = "application/vnd.oci.image.layer.v1.tar"
	MediaTypeTarGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	MediaTypeTarZstd = "application/vnd.oci.image.layer.v1.tar+zstd"
)

// Options say how to fetch or read an image. The zero value pulls
// linux/amd64 over verified TLS with the default keychain and caps.
type Options struct {
	// Platform must be "" or "linux/amd64": the guest runs nothing else.
	Platform string
	// Insecure allows a registry over plain HTTP or with a TLS
	// certificate that does not verify.
	Insecure bool
	// Token is a bearer token for the registry. It is sent to the
	// registry only and never appears in an error or an event.
	Token string
	// Keychain finds credentials when Token is "" (default
	// authn.DefaultKeychain: $DOCKER_CONFIG or ~/.docker/config.json of
	// the daemon's user). Those are the operator's credentials: a daemon
	// serving tenants should pass authn.NewMultiKeychain() (anonymous)
	// for a tenant's pull unless the operator means to share them.
	Keychain authn.Keychain
	// MaxLayerBytes caps one layer, compressed (0: DefaultMaxLayerBytes).
	MaxLayerBytes int64
	// MaxImageBytes caps all layers together, compressed (0:
	// DefaultMaxImageBytes). An import's whole archive is held to it,
	// plus room for its metadata.
	MaxImageBytes int64
	// TempDir is where Import spools the archive ("" for os.TempDir()).
	// It needs room for the archive; Image.Close removes what was put
	// there, and a failed Import leaves nothing.
	TempDir string
	// Progress, when set, gets byte counts: ImageStepFetch while an
	// image's layers are read (Image.Open), ImageStepRead while an
	// archive is read (Import), and a line or two of what was found. At
	// most a few events a second. It never gets a bare step start: the
	// caller announces its steps.
	Progress func(sandbox.ImageEvent)
	// Transport is the HTTP transport (nil: a clone of ggcr's default,
	// with TLS verification off when Insecure). A caller that must keep
	// pulls off internal addresses passes one whose dialer refuses them.
	// Insecure does not change a given Transport.
	Transport http.RoundTripper

	// retry overrides ggcr's retry backoff (tests).
	retry *remote.Backoff
}

func (o Options) maxLayer() int64 {
	if o.MaxLayerBytes > 0 {
		return o.MaxLayerBytes
	}
	return DefaultMaxLayerBytes
}

func (o Options) maxImage() int64 {
	if o.MaxImageBytes > 0 {
		return o.MaxImageBytes
	}
	return DefaultMaxImageBytes
}

func (o Options) checkPlatform() error {
	if o.Platform != "" && o.Platform != Platform {
		return fmt.Errorf("%w: platform %q: the guest runs %s only", sandbox.ErrInvalid, clip(o.Platform, 64), Platform)
	}
	return nil
}

// Image is an image ready to be built: its config and its layers, which
// Open streams in order.
type Image struct {
	// Ref is the reference pulled, canonical
	// (index.docker.io/library/debian:12); "" for an import.
	Ref string
	// Digest is the image manifest's digest (sha256:...), the one for
	// linux/amd64 when the reference named a multi-platform index. A
	// `docker save` archive has no manifest: its Digest is the config's
	// (Docker's image ID).
	Digest string
	// IndexDigest is the index's digest when the image was chosen from
	// one, else "".
	IndexDigest string
	// Config is the image config cellvm applies (checked).
	Config buildplan.Config
	// Layers are the image's layers, bottom first.
	Layers []Layer

	open     func(ctx context.Context, i int) (io.ReadCloser, error)
	closeFn  func() error
	closeMu  sync.Mutex
	closed   bool
	progress *progress
}

// Layer is one layer, compressed as its MediaType says.
type Layer struct {
	// Digest is sha256:<hex> of the compressed stream Open gives.
	Digest string
	// MediaType is MediaTypeTar, MediaTypeTarGzip or MediaTypeTarZstd.
	MediaType string
	// Size is the compressed stream's length in bytes.
	Size int64
}

// Plan is the layer as the build plan names it, at file in the inputs
// archive.
func (l Layer) Plan(file string) buildplan.Layer {
	return buildplan.Layer{File: file, MediaType: l.MediaType, Digest: l.Digest, Size: l.Size}
}

// Size is the layers' total size, compressed.
func (im *Image) Size() int64 {
	var n int64
	for _, l := range im.Layers {
		n += l.Size
	}
	return n
}

// Open streams layer i, compressed: exactly Layers[i].Size bytes. The
// stream checks the bytes against the layer's digest and size as they
// are read and fails at the end (or as soon as there are too many bytes)
// when they do not match: a caller must treat an error from Read, even
// after all the bytes came, as the layer being unusable.
// The caller closes the stream (a pull's holds one of a few
// connections). ctx bounds the reading; for a pull, it should be the
// Pull's context or one within it.
func (im *Image) Open(ctx context.Context, i int) (io.ReadCloser, error) {
	if i < 0 || i >= len(im.Layers) {
		return nil, fmt.Errorf("%w: layer %d of %d", sandbox.ErrInvalid, i, len(im.Layers))
	}
	im.closeMu.Lock()
	closed := im.closed
	im.closeMu.Unlock()
	if closed {
		return nil, fmt.Errorf("oci: layer %d of a closed image", i)
	}
	return im.open(ctx, i)
}

// Close releases what the image holds (an import's spooled archive). It
// is safe to call more than once.
func (im *Image) Close() error {
	im.closeMu.Lock()
	defer im.closeMu.Unlock()
	if im.closed {
		return nil
	}
	im.closed = true
	if im.closeFn != nil {
		return im.closeFn()
	}
	return nil
}

// Layer media types as registries and archives name them.
const (
	dockerLayerGzip       = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	dockerLayerTar        = "application/vnd.docker.image.rootfs.diff.tar"
	dockerLayerForeign    = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
	ociNondistributable   = "application/vnd.oci.image.layer.nondistributable."
	ociManifest           = "application/vnd.oci.image.manifest.v1+json"
	ociIndex              = "application/vnd.oci.image.index.v1+json"
	dockerManifest        = "application/vnd.docker.distribution.manifest.v2+json"
	dockerManifestList    = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerSchema1         = "application/vnd.docker.distribution.manifest.v1+json"
	dockerSchema1Signed   = "application/vnd.docker.distribution.manifest.v1+prettyjws"
	ociConfig             = "application/vnd.oci.image.config.v1+json"
	dockerConfig          = "application/vnd.docker.container.image.v1+json"
	maxLayersInListingErr = 16
)

// layerMediaType maps a layer descriptor's media type to the one handed
// on, or says why the layer cannot be used.
func layerMediaType(mt string) (string, error) {
	switch mt {
	case MediaTypeTar, dockerLayerTar:
		return MediaTypeTar, nil
	case MediaTypeTarGzip, dockerLayerGzip:
		return MediaTypeTarGzip, nil
	case MediaTypeTarZstd:
		return MediaTypeTarZstd, nil
	}
	if mt == dockerLayerForeign || strings.HasPrefix(mt, ociNondistributable) {
		return "", fmt.Errorf("media type %q is a foreign (non-distributable) layer, which the registry does not serve (a Windows base image?); the guest runs linux/amd64 images only", clip(mt, 96))
	}
	return "", fmt.Errorf("media type %q is not a layer cellvm can apply (want an OCI or Docker tar, tar+gzip or tar+zstd layer)", clip(mt, 96))
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func checkDigest(what, d string) error {
	if !digestRE.MatchString(d) {
		return fmt.Errorf("%w: %s has digest %q: want sha256:<64 hex digits>", sandbox.ErrInvalid, what, clip(d, 80))
	}
	return nil
}

// descriptor, manifest: the parts of OCI's (and Docker's) manifests and
// indexes cellvm reads; digests are strings checked by checkDigest.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Variant      string `json:"variant,omitempty"`
}

func (p *platform) String() string {
	if p == nil {
		return "unknown"
	}
	s := clip(p.OS, 32) + "/" + clip(p.Architecture, 32)
	if p.Variant != "" {
		s += "/" + clip(p.Variant, 32)
	}
	return s
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
	Manifests     []descriptor `json:"manifests"`
}

// imageConfig is the part of an image config cellvm reads.
type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Env        []string `json:"Env"`
		WorkingDir string   `json:"WorkingDir"`
		User       string   `json:"User"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// check checks the config for an image of nLayers layers (what names
// the image in errors) and returns what cellvm applies.
func (c *imageConfig) check(what string, nLayers int) (buildplan.Config, error) {
	// An OCI config must say os and architecture; one that says nothing
	// is let through (the guest fails plainly if it cannot run it).
	if (c.OS != "" && c.OS != "linux") || (c.Architecture != "" && c.Architecture != "amd64") {
		return buildplan.Config{}, fmt.Errorf("%w: %s is a %s/%s image; the guest runs %s only", sandbox.ErrInvalid, what, clip(c.OS, 32), clip(c.Architecture, 32), Platform)
	}
	cfg := buildplan.Config{Env: c.Config.Env, WorkingDir: c.Config.WorkingDir, User: c.Config.User}
	if err := sandbox.CheckImageEnv(cfg.Env); err != nil {
		msg := strings.TrimPrefix(err.Error(), sandbox.ErrInvalid.Error()+": ")
		return buildplan.Config{}, fmt.Errorf("%w: %s: image config: %s", sandbox.ErrInvalid, what, msg)
	}
	if cfg.User != "" && !sandbox.ValidImageUser(cfg.User) {
		return buildplan.Config{}, fmt.Errorf("%w: %s: image config's User %q: want a name or uid, optionally :group", sandbox.ErrInvalid, what, clip(cfg.User, 64))
	}
	if w := cfg.WorkingDir; w != "" && (!strings.HasPrefix(w, "/") || len(w) > 1024 || strings.ContainsAny(w, "\x00\n")) {
		return buildplan.Config{}, fmt.Errorf("%w: %s: image config's WorkingDir %q: want an absolute path", sandbox.ErrInvalid, what, clip(w, 64))
	}
	if len(c.RootFS.DiffIDs) != nLayers {
		return buildplan.Config{}, fmt.Errorf("%w: %s: its config lists %d layers (rootfs.diff_ids) and its manifest %d", sandbox.ErrInvalid, what, len(c.RootFS.DiffIDs), nLayers)
	}
	return cfg, nil
}

// checkLayers checks the layers' descriptors against the caps and media
// types before anything is fetched.
func checkLayers(what string, descs []descriptor, o Options) ([]Layer, error) {
	if len(descs) == 0 {
		return nil, fmt.Errorf("%w: %s has no layers", sandbox.ErrInvalid, what)
	}
	if len(descs) > buildplan.MaxLayers {
		return nil, fmt.Errorf("%w: %s has %d layers, at most %d", sandbox.ErrInvalid, what, len(descs), buildplan.MaxLayers)
	}
	layers := make([]Layer, len(descs))
	var total int64
	for i, d := range descs {
		lw := fmt.Sprintf("layer %d of %s", i+1, what)
		if err := checkDigest(lw, d.Digest); err != nil {
			return nil, err
		}
		lw = fmt.Sprintf("layer %d (%s) of %s", i+1, shortDigest(d.Digest), what)
		mt, err := layerMediaType(d.MediaType)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", sandbox.ErrInvalid, lw, err)
		}
		if d.Size < 0 {
			return nil, fmt.Errorf("%w: %s has a negative size", sandbox.ErrInvalid, lw)
		}
		if d.Size > o.maxLayer() {
			return nil, fmt.Errorf("%w: %s is %s compressed, over the cap of %s a layer", sandbox.ErrTooLarge, lw, mib(d.Size), mib(o.maxLayer()))
		}
		total += d.Size
		if total > o.maxImage() {
			return nil, fmt.Errorf("%w: %s: its layers are over the cap of %s an image (compressed)", sandbox.ErrTooLarge, what, mib(o.maxImage()))
		}
		layers[i] = Layer{Digest: d.Digest, MediaType: mt, Size: d.Size}
	}
	return layers, nil
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%d MiB", (n+(1<<20)-1)>>20)
}

// clip shortens s for an error message and makes it printable: what it
// clips comes from registries and archives.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// verifier reads exactly size bytes from r whose sha256 is want, and
// fails (with a wrapped sentinel) when the stream is longer, shorter or
// different.
type verifier struct {
	ctx      context.Context
	r        io.Reader
	c        io.Closer
	h        hash.Hash
	want     string
	size, n  int64
	what     string
	sentinel error
	// wrapErr describes a read error of r (nil: "reading WHAT: err").
	wrapErr func(error) error
	onRead  func(int)
	err     error
}

func newVerifier(ctx context.Context, rc io.ReadCloser, digest string, size int64, what string, sentinel error) *verifier {
	return &verifier{ctx: ctx, r: rc, c: rc, h: sha256.New(), want: strings.TrimPrefix(digest, "sha256:"), size: size, what: what, sentinel: sentinel}
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	if err := v.ctx.Err(); err != nil {
		v.err = fmt.Errorf("reading %s: %w", v.what, err)
		return 0, v.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	// Read at most one byte past the size, to see a stream too long.
	if rest := v.size - v.n + 1; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := v.r.Read(p)
	v.n += int64(n)
	if v.n > v.size {
		v.err = fmt.Errorf("%w: %s is longer than its %d bytes", v.sentinel, v.what, v.size)
		return 0, v.err
	}
	v.h.Write(p[:n])
	if v.onRead != nil && n > 0 {
		v.onRead(n)
	}
	switch {
	case err == io.EOF:
		if v.n != v.size {
			v.err = fmt.Errorf("%w: %s ended after %d of its %d bytes", v.sentinel, v.what, v.n, v.size)
			return n, v.err
		}
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			v.err = fmt.Errorf("%w: %s does not match its digest: its bytes hash to sha256:%s", v.sentinel, v.what, got)
			return n, v.err
		}
		v.err = io.EOF
		return n, io.EOF
	case err != nil:
		if v.wrapErr != nil {
			v.err = v.wrapErr(err)
		} else {
			v.err = fmt.Errorf("%w: reading %s: %v", v.sentinel, v.what, err)
		}
		return n, v.err
	}
	return n, nil
}

func (v *verifier) Close() error { return v.c.Close() }

// readAllVerified reads a whole metadata blob through a verifier.
func readAllVerified(v *verifier) ([]byte, error) {
	b, err := io.ReadAll(v)
	v.Close()
	return b, err
}

// progress sends byte counts of one step, at most every progressEvery
// and once when done reaches total.
type progress struct {
	fn    func(sandbox.ImageEvent)
	step  string
	total int64
	mu    sync.Mutex
	done  int64
	last  time.Time
}

const progressEvery = 250 * time.Millisecond

func newProgress(fn func(sandbox.ImageEvent), step string, total int64) *progress {
	return &progress{fn: fn, step: step, total: total}
}

func (p *progress) add(n int) {
	if p == nil || p.fn == nil {
		return
	}
	p.mu.Lock()
	p.done += int64(n)
	now := time.Now()
	send := now.Sub(p.last) >= progressEvery || (p.total > 0 && p.done == p.total)
	ev := sandbox.ImageEvent{Step: p.step, Done: p.done, Total: p.total}
	if send {
		p.last = now
	}
	p.mu.Unlock()
	if send {
		p.fn(ev)
	}
}

func (p *progress) say(msg string) {
	if p != nil && p.fn != nil {
		p.fn(sandbox.ImageEvent{Step: p.step, Message: msg})
	}
}

// removeAll removes a temp dir, for Close and for a failed Import.
func removeAll(dir string) error {
	if dir == "" {
		return nil
	}
	return os.RemoveAll(dir)
}
