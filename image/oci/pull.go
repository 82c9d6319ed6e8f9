package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/cellvm/cellvm/sandbox"
)

// Pull resolves ref on its registry to a linux/amd64 image, fetches and
// checks its manifest and config, and checks its layers' descriptors
// against the caps. The layers themselves are fetched when Image.Open
// reads them (each a fresh request, checked as it is read).
func Pull(ctx context.Context, ref string, o Options) (*Image, error) {
	if err := o.checkPlatform(); err != nil {
		return nil, err
	}
	if ref == "" || len(ref) > sandbox.MaxImageRef || strings.ContainsAny(ref, " \t\r\n\x00") {
		return nil, fmt.Errorf("%w: %q is not an image reference", sandbox.ErrInvalid, clip(ref, 64))
	}
	var nopts []name.Option
	if o.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		return nil, fmt.Errorf("%w: image reference %q: %v", sandbox.ErrInvalid, clip(ref, 64), err)
	}
	p := &puller{ref: r, refName: r.Name(), token: o.Token, o: o}
	if err := p.start(); err != nil {
		return nil, err
	}
	return p.pull(ctx)
}

type puller struct {
	ref     name.Reference
	refName string
	token   string
	o       Options
	rp      *remote.Puller
}

func (p *puller) start() error {
	var base http.RoundTripper
	if p.o.Transport != nil {
		base = p.o.Transport
	} else {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		if p.o.Insecure {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the caller asked for an insecure registry
		}
		base = t
	}
	opts := []remote.Option{
		remote.WithTransport(&metadataLimit{base}),
		remote.WithUserAgent("cellvm"),
	}
	if p.token != "" {
		opts = append(opts, remote.WithAuth(authn.FromConfig(authn.AuthConfig{RegistryToken: p.token})))
	} else {
		kc := p.o.Keychain
		if kc == nil {
			kc = authn.DefaultKeychain
		}
		opts = append(opts, remote.WithAuthFromKeychain(kc))
	}
	if p.o.retry != nil {
		opts = append(opts, remote.WithRetryBackoff(*p.o.retry))
	}
	rp, err := remote.NewPuller(opts...)
	if err != nil {
		return fmt.Errorf("pull %s: %w", p.refName, err)
	}
	p.rp = rp
	return nil
}

func (p *puller) pull(ctx context.Context) (*Image, error) {
	prog := newProgress(p.o.Progress, sandbox.ImageStepFetch, 0)
	raw, mt, err := p.getManifest(ctx, p.ref, "")
	if err != nil {
		return nil, err
	}
	im := &Image{Ref: p.refName}
	m, err := parseManifest(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: its manifest: %v", sandbox.ErrInvalid, p.refName, err)
	}
	mt = manifestType(mt, m)
	if isIndex(mt, m) {
		im.IndexDigest = digestOf(raw)
		d, err := chooseFromIndex(p.refName, m)
		if err != nil {
			return nil, err
		}
		raw, mt, err = p.getManifest(ctx, p.ref.Context().Digest(d.Digest), d.Digest)
		if err != nil {
			return nil, err
		}
		if m, err = parseManifest(raw); err != nil {
			return nil, fmt.Errorf("%w: %s: its linux/amd64 manifest: %v", sandbox.ErrInvalid, p.refName, err)
		}
		mt = manifestType(mt, m)
		if isIndex(mt, m) {
			return nil, fmt.Errorf("%w: %s: its index names another index for linux/amd64; cellvm follows one level", sandbox.ErrInvalid, p.refName)
		}
	}
	if err := checkImageManifest(p.refName, mt, m); err != nil {
		return nil, err
	}
	im.Digest = digestOf(raw)

	layers, err := checkLayers(p.refName, m.Layers, p.o)
	if err != nil {
		return nil, err
	}
	cfgRaw, err := p.blob(ctx, m.Config, "the config of "+p.refName, MaxMetadataBytes)
	if err != nil {
		return nil, err
	}
	var cfg imageConfig
	if err := json.Unmarshal(cfgRaw, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: its config is not JSON: %v", sandbox.ErrInvalid, p.refName, err)
	}
	if im.Config, err = cfg.check(p.refName, len(layers)); err != nil {
		return nil, err
	}
	im.Layers = layers
	im.progress = newProgress(p.o.Progress, sandbox.ImageStepFetch, im.Size())
	im.open = p.opener(im)
	prog.say(fmt.Sprintf("%s: %s, %d layers, %s", p.refName, im.Digest, len(layers), mib(im.Size())))
	return im, nil
}

// getManifest fetches a manifest or index (bounded by metadataLimit) and,
// when fetched by digest, checks it.
func (p *puller) getManifest(ctx context.Context, ref name.Reference, want string) ([]byte, string, error) {
	d, err := p.rp.Get(ctx, ref)
	if err != nil {
		return nil, "", p.upstream(ctx, "its manifest", err)
	}
	if dg, ok := ref.(name.Digest); ok && want == "" {
		want = dg.DigestStr()
	}
	if want != "" {
		if err := checkDigest("the manifest of "+p.refName, want); err != nil {
			return nil, "", err
		}
		if got := digestOf(d.Manifest); got != want {
			return nil, "", fmt.Errorf("%w: %s: the registry sent a manifest whose digest is %s, not %s", sandbox.ErrUpstream, p.refName, got, want)
		}
	}
	return d.Manifest, string(d.MediaType), nil
}

// blob fetches a small blob whole (a config), checked against d.
func (p *puller) blob(ctx context.Context, d descriptor, what string, max int64) ([]byte, error) {
	if err := checkDigest(what, d.Digest); err != nil {
		return nil, err
	}
	if d.Size < 0 || d.Size > max {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d", sandbox.ErrInvalid, what, d.Size, max)
	}
	rc, err := p.openBlob(ctx, d.Digest, what)
	if err != nil {
		return nil, err
	}
	v := newVerifier(ctx, rc, d.Digest, d.Size, what, sandbox.ErrUpstream)
	v.wrapErr = func(err error) error { return p.upstream(ctx, what, err) }
	return readAllVerified(v)
}

func (p *puller) openBlob(ctx context.Context, digest, what string) (io.ReadCloser, error) {
	l, err := p.rp.Layer(ctx, p.ref.Context().Digest(digest))
	if err != nil {
		return nil, p.upstream(ctx, what, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, p.upstream(ctx, what, err)
	}
	return rc, nil
}

func (p *puller) opener(im *Image) func(ctx context.Context, i int) (io.ReadCloser, error) {
	return func(ctx context.Context, i int) (io.ReadCloser, error) {
		l := im.Layers[i]
		what := fmt.Sprintf("layer %d (%s) of %s", i+1, shortDigest(l.Digest), p.refName)
		rc, err := p.openBlob(ctx, l.Digest, what)
		if err != nil {
			return nil, err
		}
		v := newVerifier(ctx, rc, l.Digest, l.Size, what, sandbox.ErrUpstream)
		v.wrapErr = func(err error) error { return p.upstream(ctx, what, err) }
		v.onRead = im.progress.add
		return v, nil
	}
}

// upstream turns an error of a registry request into one that wraps
// sandbox.ErrUpstream (or the context's error), names the reference and
// says what the registry said, without the token.
func (p *puller) upstream(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("pull %s: fetching %s: %w", p.refName, what, ctxErr)
	}
	if errors.Is(err, sandbox.ErrUpstream) || errors.Is(err, sandbox.ErrInvalid) || errors.Is(err, sandbox.ErrTooLarge) {
		return err
	}
	var te *transport.Error
	if !errors.As(err, &te) {
		if errors.Is(err, errMetadataTooLarge) {
			return fmt.Errorf("%w: pull %s: %s is over %d bytes", sandbox.ErrInvalid, p.refName, what, MaxMetadataBytes)
		}
		return fmt.Errorf("%w: pull %s: fetching %s from %s: %s", sandbox.ErrUpstream, p.refName, what, p.ref.Context().RegistryStr(), p.redact(err.Error()))
	}
	said := registrySaid(te)
	var msg string
	switch {
	case te.StatusCode == http.StatusUnauthorized || hasCode(te, transport.UnauthorizedErrorCode):
		msg = "the registry refused access (" + said + "); give a registry token, or log in to the registry on the daemon's host"
	case te.StatusCode == http.StatusForbidden || hasCode(te, transport.DeniedErrorCode):
		msg = "the registry denied access (" + said + ")"
	case te.StatusCode == http.StatusNotFound || hasCode(te, transport.ManifestUnknownErrorCode) || hasCode(te, transport.NameUnknownErrorCode) || hasCode(te, transport.BlobUnknownErrorCode):
		msg = "the registry has no such image (" + said + ")"
		if what != "its manifest" {
			msg = "the registry does not have " + what + " (" + said + ")"
		}
	case te.StatusCode == http.StatusTooManyRequests || hasCode(te, transport.TooManyRequestsErrorCode):
		msg = "the registry is rate limiting (" + said + "); try again later"
	default:
		msg = "fetching " + what + ": " + said
	}
	return fmt.Errorf("%w: pull %s: %s", sandbox.ErrUpstream, p.refName, p.redact(msg))
}

func (p *puller) redact(s string) string {
	if p.token != "" {
		s = strings.ReplaceAll(s, p.token, "[token]")
	}
	return s
}

func hasCode(te *transport.Error, c transport.ErrorCode) bool {
	for _, d := range te.Errors {
		if d.Code == c {
			return true
		}
	}
	return false
}

// registrySaid is the status and the registry's first error codes and
// messages, clipped: they come from the registry.
func registrySaid(te *transport.Error) string {
	s := fmt.Sprintf("HTTP %d", te.StatusCode)
	for i, d := range te.Errors {
		if i == 3 {
			s += "; ..."
			break
		}
		s += "; " + clip(string(d.Code), 40)
		if d.Message != "" {
			s += ": " + clip(d.Message, 160)
		}
	}
	return s
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func parseManifest(raw []byte) (*manifest, error) {
	if len(raw) > MaxMetadataBytes {
		return nil, fmt.Errorf("%d bytes, at most %d", len(raw), MaxMetadataBytes)
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not JSON: %v", err)
	}
	return &m, nil
}

// manifestType is the manifest's media type: the registry's
// Content-Type when it is one of the manifest types, else what the
// manifest says of itself ("" when nothing: the structure decides).
func manifestType(header string, m *manifest) string {
	switch header {
	case ociManifest, ociIndex, dockerManifest, dockerManifestList, dockerSchema1, dockerSchema1Signed:
		return header
	}
	return m.MediaType
}

func isIndex(mt string, m *manifest) bool {
	switch mt {
	case ociIndex, dockerManifestList:
		return true
	case ociManifest, dockerManifest:
		return false
	}
	return len(m.Manifests) > 0 && len(m.Layers) == 0
}

// checkImageManifest refuses what is not an image manifest cellvm can
// use: schema 1, artifacts, anything but OCI's and Docker's v2.
func checkImageManifest(what, mt string, m *manifest) error {
	switch mt {
	case ociManifest, dockerManifest:
	case dockerSchema1, dockerSchema1Signed:
		return fmt.Errorf("%w: %s is a Docker schema 1 image, which cellvm does not read (push it again with a current docker or crane)", sandbox.ErrInvalid, what)
	case "":
		if m.SchemaVersion != 2 || m.Config.Digest == "" {
			return fmt.Errorf("%w: %s: its manifest is not an OCI or Docker v2 image manifest", sandbox.ErrInvalid, what)
		}
	default:
		return fmt.Errorf("%w: %s is not an image: its manifest's media type is %q", sandbox.ErrInvalid, what, clip(mt, 96))
	}
	switch m.Config.MediaType {
	case ociConfig, dockerConfig:
	default:
		return fmt.Errorf("%w: %s is not a container image (an artifact? its config's media type is %q)", sandbox.ErrInvalid, what, clip(m.Config.MediaType, 96))
	}
	return nil
}

// chooseFromIndex picks linux/amd64 from an index, preferring no
// variant; none is ErrInvalid listing what the index has.
func chooseFromIndex(what string, m *manifest) (descriptor, error) {
	var best *descriptor
	var have []string
	seen := map[string]bool{}
	for i := range m.Manifests {
		d := &m.Manifests[i]
		if d.Platform == nil || d.Platform.OS == "unknown" {
			continue // attestations, signatures
		}
		if d.Platform.OS == "linux" && d.Platform.Architecture == "amd64" && (d.MediaType == ociManifest || d.MediaType == dockerManifest) {
			if best == nil || (best.Platform.Variant != "" && d.Platform.Variant == "") {
				best = d
			}
			continue
		}
		if s := d.Platform.String(); !seen[s] && len(have) < maxLayersInListingErr {
			seen[s] = true
			have = append(have, s)
		}
	}
	if best == nil {
		if len(have) == 0 {
			have = []string{"no platforms it names"}
		}
		return descriptor{}, fmt.Errorf("%w: %s has no linux/amd64 image; it has: %s", sandbox.ErrInvalid, what, strings.Join(have, ", "))
	}
	if err := checkDigest("the linux/amd64 manifest of "+what, best.Digest); err != nil {
		return descriptor{}, err
	}
	return *best, nil
}

// metadataLimit bounds what a registry sends for a manifest (ggcr reads
// up to 100 MiB) to MaxMetadataBytes.
type metadataLimit struct{ rt http.RoundTripper }

var errMetadataTooLarge = errors.New("manifest over the size cap")

func (m *metadataLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := m.rt.RoundTrip(req)
	if err != nil || !strings.Contains(req.URL.Path, "/manifests/") {
		return resp, err
	}
	if resp.ContentLength > MaxMetadataBytes {
		resp.Body.Close()
		return nil, errMetadataTooLarge
	}
	resp.Body = &limitedBody{rc: resp.Body, left: MaxMetadataBytes}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left < 0 {
		return 0, errMetadataTooLarge
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, errMetadataTooLarge
	}
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }
