package oci

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/cellvm/cellvm/sandbox"
)

// Import reads an image from r: a `docker save` tarball (manifest.json,
// the config, the layers) or an OCI image layout as a tar (oci-layout,
// index.json, blobs/sha256/...), optionally gzip-compressed. The archive
// is spooled under o.TempDir and checked whole before Import returns:
// every blob of an OCI layout against its digest, every layer of a docker
// save against its config's diff_ids. An archive holding both (docker
// 25's save) is read as the OCI layout. It must hold one linux/amd64
// image; more are refused with a list.
//
// The Image holds the spool until Close; a failed Import leaves nothing.
func Import(ctx context.Context, r io.Reader, o Options) (_ *Image, err error) {
	if err := o.checkPlatform(); err != nil {
		return nil, err
	}
	s, err := readArchive(ctx, r, o)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			removeAll(s.dir)
		}
	}()
	var im *Image
	var files []*spoolFile
	_, hasLayout := s.lookup("oci-layout")
	_, hasIndex := s.lookup("index.json")
	_, hasManifest := s.lookup("manifest.json")
	switch {
	case hasLayout && hasIndex:
		im, files, err = s.layoutImage(o)
	case hasManifest:
		im, files, err = s.dockerSaveImage(ctx, o)
	default:
		return nil, fmt.Errorf("%w: import: not a docker save tarball or an OCI layout (or one cut short): the archive has no manifest.json, nor oci-layout and index.json", sandbox.ErrInvalid)
	}
	if err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, f := range files {
		keep[f.file] = true
	}
	s.keepOnly(keep)
	dir := s.dir
	im.closeFn = func() error { return removeAll(dir) }
	im.open = func(ctx context.Context, i int) (io.ReadCloser, error) {
		f, err := os.Open(files[i].file)
		if err != nil {
			return nil, fmt.Errorf("import: layer %d from the spool: %w", i+1, err)
		}
		l := im.Layers[i]
		return newVerifier(ctx, f, l.Digest, l.Size, fmt.Sprintf("layer %d (%s) of the archive", i+1, shortDigest(l.Digest)), sandbox.ErrInvalid), nil
	}
	return im, nil
}

// blob finds an OCI layout's blob for d and checks it.
func (s *spool) blob(what string, d descriptor) (*spoolFile, error) {
	if err := checkDigest(what, d.Digest); err != nil {
		return nil, err
	}
	f, ok := s.lookup("blobs/sha256/" + strings.TrimPrefix(d.Digest, "sha256:"))
	if !ok {
		return nil, fmt.Errorf("%w: import: the archive lacks %s (blobs/sha256/%s); is it truncated?", sandbox.ErrInvalid, what, strings.TrimPrefix(d.Digest, "sha256:"))
	}
	if f.digest != d.Digest {
		return nil, fmt.Errorf("%w: import: %s is corrupt: its bytes hash to %s, not %s", sandbox.ErrInvalid, what, f.digest, d.Digest)
	}
	if f.size != d.Size {
		return nil, fmt.Errorf("%w: import: %s is %d bytes; its descriptor says %d", sandbox.ErrInvalid, what, f.size, d.Size)
	}
	return f, nil
}

func (s *spool) blobJSON(what string, d descriptor, v any) error {
	f, err := s.blob(what, d)
	if err != nil {
		return err
	}
	b, err := s.readSmall(what, f)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: import: %s is not JSON: %v", sandbox.ErrInvalid, what, err)
	}
	return nil
}

// layoutImage reads the archive as an OCI image layout: index.json names
// manifests or indexes (followed two levels down); the linux/amd64 image
// manifests found must come to one image.
func (s *spool) layoutImage(o Options) (*Image, []*spoolFile, error) {
	f, _ := s.lookup("index.json")
	b, err := s.readSmall("index.json", f)
	if err != nil {
		return nil, nil, err
	}
	top, err := parseManifest(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: import: index.json: %v", sandbox.ErrInvalid, err)
	}
	type cand struct {
		d    descriptor
		m    *manifest
		cfg  imageConfig
		name string
	}
	var cands []cand
	var others []string
	seen := map[string]bool{}
	var walk func(ds []descriptor, depth int, name string) error
	walk = func(ds []descriptor, depth int, name string) error {
		if len(ds) > 4096 {
			return fmt.Errorf("%w: import: an index of the archive names %d manifests", sandbox.ErrInvalid, len(ds))
		}
		for _, d := range ds {
			n := name
			if a := d.Annotations["org.opencontainers.image.ref.name"]; a != "" && n == "" {
				n = a
			}
			if a := d.Annotations["io.containerd.image.name"]; a != "" {
				n = a
			}
			if d.Platform != nil && (d.Platform.OS != "linux" || d.Platform.Architecture != "amd64") {
				if d.Platform.OS != "unknown" && len(others) < maxLayersInListingErr {
					others = append(others, d.Platform.String())
				}
				continue
			}
			what := "manifest " + shortDigest(d.Digest)
			switch d.MediaType {
			case ociIndex, dockerManifestList:
				if depth >= 2 {
					return fmt.Errorf("%w: import: the archive's indexes nest over 2 deep", sandbox.ErrInvalid)
				}
				var m manifest
				if err := s.blobJSON("index "+shortDigest(d.Digest), d, &m); err != nil {
					return err
				}
				if err := walk(m.Manifests, depth+1, n); err != nil {
					return err
				}
			case ociManifest, dockerManifest:
				if seen[d.Digest] {
					continue
				}
				seen[d.Digest] = true
				var m manifest
				if err := s.blobJSON(what, d, &m); err != nil {
					return err
				}
				if err := checkImageManifest("the archive's "+what, d.MediaType, &m); err != nil {
					return err
				}
				var cfg imageConfig
				if err := s.blobJSON("the config of "+what, m.Config, &cfg); err != nil {
					return err
				}
				if cfg.OS == "unknown" {
					continue // an attestation
				}
				if (cfg.OS != "" && cfg.OS != "linux") || (cfg.Architecture != "" && cfg.Architecture != "amd64") {
					if len(others) < maxLayersInListingErr {
						others = append(others, cfg.OS+"/"+cfg.Architecture)
					}
					continue
				}
				cands = append(cands, cand{d: d, m: &m, cfg: cfg, name: n})
			default:
				// Not an image (an artifact, a signature): not ours.
			}
		}
		return nil
	}
	if err := walk(top.Manifests, 0, ""); err != nil {
		return nil, nil, err
	}
	switch len(cands) {
	case 0:
		msg := "the OCI layout holds no linux/amd64 image"
		if len(others) > 0 {
			msg += "; it has: " + strings.Join(others, ", ")
		}
		return nil, nil, fmt.Errorf("%w: import: %s", sandbox.ErrInvalid, clip(msg, 1024))
	case 1:
	default:
		var list []string
		for _, c := range cands {
			l := c.d.Digest
			if c.name != "" {
				l = clip(c.name, 128) + " (" + c.d.Digest + ")"
			}
			list = append(list, l)
		}
		sort.Strings(list)
		return nil, nil, fmt.Errorf("%w: import: the archive holds %d linux/amd64 images; import one at a time: %s", sandbox.ErrInvalid, len(cands), strings.Join(list, ", "))
	}
	c := cands[0]
	what := "the archive's image " + shortDigest(c.d.Digest)
	layers, err := checkLayers(what, c.m.Layers, o)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := c.cfg.check(what, len(layers))
	if err != nil {
		return nil, nil, err
	}
	files := make([]*spoolFile, len(layers))
	for i, l := range c.m.Layers {
		if files[i], err = s.blob(fmt.Sprintf("layer %d (%s)", i+1, shortDigest(l.Digest)), l); err != nil {
			return nil, nil, err
		}
	}
	return &Image{Digest: c.d.Digest, Config: cfg, Layers: layers}, files, nil
}

// dockerSave is an entry of a docker save archive's manifest.json.
type dockerSave struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// configNameRE finds a digest in the name docker save (or ggcr) gives
// the config: <hex>.json, blobs/sha256/<hex>, sha256:<hex>.
var configNameRE = regexp.MustCompile(`(?:^|/|sha256:)([0-9a-f]{64})(?:\.json)?$`)

// dockerSaveImage reads the archive as a docker save tarball. The layers
// are whatever files manifest.json names, of any compression: each is
// checked against its config's diff_id (the digest of its tar), and its
// Digest is that of the file as it is.
func (s *spool) dockerSaveImage(ctx context.Context, o Options) (*Image, []*spoolFile, error) {
	f, _ := s.lookup("manifest.json")
	b, err := s.readSmall("manifest.json", f)
	if err != nil {
		return nil, nil, err
	}
	var entries []dockerSave
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, nil, fmt.Errorf("%w: import: manifest.json is not a docker save manifest: %v", sandbox.ErrInvalid, err)
	}
	switch len(entries) {
	case 0:
		return nil, nil, fmt.Errorf("%w: import: manifest.json lists no image", sandbox.ErrInvalid)
	case 1:
	default:
		var list []string
		for _, e := range entries {
			if len(list) == maxLayersInListingErr {
				list = append(list, "...")
				break
			}
			if len(e.RepoTags) > 0 {
				list = append(list, clip(strings.Join(e.RepoTags, " "), 128))
			} else {
				list = append(list, clip(e.Config, 96))
			}
		}
		return nil, nil, fmt.Errorf("%w: import: the archive holds %d images; import one at a time (docker save one image): %s", sandbox.ErrInvalid, len(entries), strings.Join(list, ", "))
	}
	e := entries[0]
	cf, ok := s.lookup(e.Config)
	if !ok {
		return nil, nil, fmt.Errorf("%w: import: the archive lacks its config %q; is it truncated?", sandbox.ErrInvalid, clip(e.Config, 96))
	}
	if m := configNameRE.FindStringSubmatch(e.Config); m != nil && "sha256:"+m[1] != cf.digest {
		return nil, nil, fmt.Errorf("%w: import: the config %q is corrupt: its bytes hash to %s", sandbox.ErrInvalid, clip(e.Config, 96), cf.digest)
	}
	cb, err := s.readSmall("the config", cf)
	if err != nil {
		return nil, nil, err
	}
	var cfg imageConfig
	if err := json.Unmarshal(cb, &cfg); err != nil {
		return nil, nil, fmt.Errorf("%w: import: the config %q is not JSON: %v", sandbox.ErrInvalid, clip(e.Config, 96), err)
	}
	what := "the archive's image"
	if len(e.RepoTags) > 0 {
		what += " " + clip(e.RepoTags[0], 128)
	}
	if len(e.Layers) != len(cfg.RootFS.DiffIDs) {
		_, err := cfg.check(what, len(e.Layers))
		if err == nil {
			err = fmt.Errorf("%w: import: %s has %d layers", sandbox.ErrInvalid, what, len(e.Layers))
		}
		return nil, nil, err
	}
	descs := make([]descriptor, len(e.Layers))
	files := make([]*spoolFile, len(e.Layers))
	for i, name := range e.Layers {
		lf, ok := s.lookup(name)
		if !ok {
			return nil, nil, fmt.Errorf("%w: import: the archive lacks layer %d (%q); is it truncated?", sandbox.ErrInvalid, i+1, clip(name, 96))
		}
		mt, err := sniffLayer(lf)
		if err != nil {
			return nil, nil, fmt.Errorf("import: layer %d (%q): %w", i+1, clip(name, 96), err)
		}
		descs[i] = descriptor{MediaType: mt, Digest: lf.digest, Size: lf.size}
		files[i] = lf
	}
	layers, err := checkLayers(what, descs, o)
	if err != nil {
		return nil, nil, err
	}
	bcfg, err := cfg.check(what, len(layers))
	if err != nil {
		return nil, nil, err
	}
	for i, l := range layers {
		want := cfg.RootFS.DiffIDs[i]
		if err := checkDigest(fmt.Sprintf("the config's diff_id %d", i+1), want); err != nil {
			return nil, nil, err
		}
		got := l.Digest
		if l.MediaType != MediaTypeTar {
			if got, err = diffID(ctx, files[i], l.MediaType); err != nil {
				lw := fmt.Sprintf("layer %d (%q)", i+1, clip(e.Layers[i], 96))
				switch {
				case ctx.Err() != nil:
					return nil, nil, fmt.Errorf("import: checking %s: %w", lw, ctx.Err())
				case errors.Is(err, errDiffTooLarge):
					return nil, nil, fmt.Errorf("%w: import: %s decompresses to over %s", sandbox.ErrTooLarge, lw, mib(maxDiffBytes))
				}
				return nil, nil, fmt.Errorf("%w: import: %s is corrupt: %v", sandbox.ErrInvalid, lw, err)
			}
		}
		if got != want {
			return nil, nil, fmt.Errorf("%w: import: layer %d (%q) is corrupt: its tar's digest is %s; the config says %s", sandbox.ErrInvalid, i+1, clip(e.Layers[i], 96), got, want)
		}
	}
	return &Image{Digest: cf.digest, Config: bcfg, Layers: layers}, files, nil
}

// sniffLayer tells a docker save layer's compression by its first bytes.
func sniffLayer(f *spoolFile) (string, error) {
	fh, err := os.Open(f.file)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	var magic [4]byte
	n, _ := io.ReadFull(fh, magic[:])
	switch {
	case n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		return MediaTypeTarGzip, nil
	case n == 4 && bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}):
		return MediaTypeTarZstd, nil
	}
	return MediaTypeTar, nil
}

// diffID is the digest of a compressed layer's tar. The host decompresses
// the layer into a hash only, never into files; the output is bounded
// by maxDiffBytes and the context.
func diffID(ctx context.Context, f *spoolFile, mt string) (string, error) {
	fh, err := os.Open(f.file)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	in := bufio.NewReaderSize(fh, 256<<10)
	var zr io.Reader
	switch mt {
	case MediaTypeTarGzip:
		g, err := gzip.NewReader(in)
		if err != nil {
			return "", fmt.Errorf("its gzip stream: %v", err)
		}
		defer g.Close()
		zr = g
	case MediaTypeTarZstd:
		z, err := zstd.NewReader(in, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return "", fmt.Errorf("its zstd stream: %v", err)
		}
		defer z.Close()
		zr = z
	default:
		return "", fmt.Errorf("media type %s", mt)
	}
	h := sha256.New()
	n, err := io.Copy(h, &cappedReader{r: &ctxReader{ctx: ctx, r: zr}, left: maxDiffBytes, capErr: errDiffTooLarge})
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return "", ctxErr
		}
		if errors.Is(err, errDiffTooLarge) {
			return "", err
		}
		return "", fmt.Errorf("decompressing it failed after %d bytes: %v", n, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// maxDiffBytes bounds a layer's decompressed size: no image disk is
// larger (buildplan's 1 TiB).
const maxDiffBytes = 1 << 40

var errDiffTooLarge = errors.New("decompressed layer over the cap")

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
