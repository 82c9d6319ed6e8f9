package build

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"

	"github.com/cellvm/cellvm/image/buildplan"
)

// The inputs disk is a tar archive read once, front to back: the plan,
// then the small inputs (collect.py, modules.txt, inputs/...), copied to
// the work directory, then the layers, in the plan's order, each applied
// to the image while it is read (no copy of it is kept anywhere).

// DefaultMaxInputs bounds the small inputs kept in the work directory (a
// tmpfs: the VM's memory).
const DefaultMaxInputs = 1 << 30

// maxTrailing bounds what a layer's compressed stream may hold after its
// tar archive's end.
const maxTrailing = 64 << 20

type inputStream struct {
	f       *os.File
	tr      *tar.Reader
	pending *tar.Header
}

func openInputs(path string) (*inputStream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("the inputs disk: %w", err)
	}
	return &inputStream{f: f, tr: tar.NewReader(f)}, nil
}

func (in *inputStream) close() { in.f.Close() }

// next is the next entry (the pending one first); nil at the end.
func (in *inputStream) next() (*tar.Header, error) {
	if h := in.pending; h != nil {
		in.pending = nil
		return h, nil
	}
	h, err := in.tr.Next()
	if err == io.EOF {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the inputs archive: %w", err)
	}
	return h, nil
}

// readPlan reads and checks the archive's first entry, the plan.
func (in *inputStream) readPlan() (buildplan.Plan, error) {
	var p buildplan.Plan
	h, err := in.next()
	if err != nil {
		return p, err
	}
	if h == nil {
		return p, errors.New("the inputs archive is empty: no plan")
	}
	if n, _ := cleanName(h.Name); n != buildplan.PlanFile || (h.Typeflag != tar.TypeReg && h.Typeflag != '\x00') {
		return p, fmt.Errorf("the inputs archive starts with %q, not the plan %s", clip(h.Name), buildplan.PlanFile)
	}
	if h.Size > buildplan.MaxPlanBytes {
		return p, fmt.Errorf("the plan is %d bytes, at most %d", h.Size, buildplan.MaxPlanBytes)
	}
	b, err := io.ReadAll(io.LimitReader(in.tr, buildplan.MaxPlanBytes+1))
	if err != nil {
		return p, fmt.Errorf("reading the plan: %w", err)
	}
	return parsePlan(b)
}

// parsePlan decodes a plan strictly (no unknown fields, nothing after it)
// and validates it.
func parsePlan(b []byte) (buildplan.Plan, error) {
	var p buildplan.Plan
	if len(b) > buildplan.MaxPlanBytes {
		return p, fmt.Errorf("the plan is %d bytes, at most %d", len(b), buildplan.MaxPlanBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("the plan: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return p, errors.New("the plan: data after its JSON object")
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// smallName reports whether name (cleaned) is one of the small inputs.
func smallName(p *buildplan.Plan, name string) bool {
	return name == p.Collect || name == p.Modules || name == buildplan.InputsDir || strings.HasPrefix(name, buildplan.InputsDir+"/")
}

// readSmall copies the small inputs into a (a Root of the work
// directory's inputs, in inputs mode), up to the first layer or the end.
func (in *inputStream) readSmall(p *buildplan.Plan, a *Applier) error {
	l := a.newLayer()
	for {
		h, err := in.next()
		if err != nil {
			return err
		}
		if h == nil {
			break
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return fmt.Errorf("the inputs archive: entry %q: %w", clip(h.Name), err)
		}
		if len(p.Layers) > 0 && name == p.Layers[0].File {
			in.pending = h
			break
		}
		if !smallName(p, name) {
			return fmt.Errorf("the inputs archive: unexpected entry %q (want %s, %s, %s/..., then the layers)", clip(h.Name), p.Collect, p.Modules, buildplan.InputsDir)
		}
		if err := a.entry(l, h, in.tr); err != nil {
			return fmt.Errorf("the build's inputs: %w", err)
		}
	}
	return a.finish(l)
}

// applyLayers applies the plan's layers, which come next, in order, and
// checks that nothing follows them.
func (in *inputStream) applyLayers(p *buildplan.Plan, a *Applier, pr *progress) error {
	for i, l := range p.Layers {
		h, err := in.next()
		if err != nil {
			return err
		}
		if h == nil {
			return fmt.Errorf("the inputs archive ends before layer %d (%s)", i+1, l.File)
		}
		if name, _ := cleanName(h.Name); name != l.File || (h.Typeflag != tar.TypeReg && h.Typeflag != '\x00') {
			return fmt.Errorf("the inputs archive has %q where layer %d (%s) should be", clip(h.Name), i+1, l.File)
		}
		if l.Size > 0 && h.Size != l.Size {
			return fmt.Errorf("layer %d (%s) is %d bytes, the plan says %d", i+1, l.File, h.Size, l.Size)
		}
		pr.Printf("layer %d of %d: %s %.1f MiB", i+1, len(p.Layers), short(l.Digest), float64(h.Size)/(1<<20))
		if err := applyLayer(in.tr, l, a); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i+1, short(l.Digest), err)
		}
	}
	h, err := in.next()
	if err != nil {
		return err
	}
	if h != nil {
		return fmt.Errorf("the inputs archive: unexpected entry %q after the layers", clip(h.Name))
	}
	return nil
}

// applyLayer decompresses and applies one layer blob, checking its digest
// (sha256) as it goes.
func applyLayer(r io.Reader, l buildplan.Layer, a *Applier) error {
	var h hash.Hash
	want := ""
	if d, ok := strings.CutPrefix(l.Digest, "sha256:"); ok && len(d) == 64 {
		h, want = sha256.New(), d
		r = io.TeeReader(r, h)
	}
	dec, done, err := Decompress(r, l.MediaType)
	if err != nil {
		return err
	}
	defer done()
	if err := a.Apply(dec); err != nil {
		return err
	}
	// The tar's end may be followed by padding; the compressed stream's
	// own end (and checksum) must still be read.
	if n, err := io.Copy(io.Discard, io.LimitReader(dec, maxTrailing+1)); err != nil {
		return fmt.Errorf("after the layer's archive: %w", err)
	} else if n > maxTrailing {
		return errors.New("more than 64 MiB after the layer's archive")
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	if h != nil {
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return fmt.Errorf("its digest is sha256:%s, the plan says %s", got, l.Digest)
		}
	}
	return nil
}

func short(digest string) string {
	if len(digest) > 19 {
		return clean(digest[:19])
	}
	return clean(digest)
}
