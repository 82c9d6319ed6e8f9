package engine

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/manifest"
)

// The inputs disk (/dev/vdb in the builder VM) is one tar archive, in the
// order the guest reads it: PlanFile first (the guest learns what follows
// from it), then the small files (collect.py, modules.txt, the recipe's
// inputs/...), then the OCI layers in plan order last, so that the guest
// applies each as it streams past and never needs to seek back. Every
// header is the host's: mode 0644 files (inputs keep theirs), owner root,
// time zero.

const (
	collectFile = "collect.py"
	modulesFile = "modules.txt"
)

// layerFile is layer i's name in the inputs archive.
func layerFile(i int) string { return fmt.Sprintf("layers/%04d", i) }

// inputsSource is what writeInputs copies after the plan.
type inputsSource struct {
	// spool is the recipe's inputs (a tar of inputs/...); nil for none.
	spool io.Reader
	// openLayer streams layer i of the plan (nil without layers).
	openLayer func(i int) (io.ReadCloser, error)
	// progress is told the layer bytes written so far (may be nil).
	progress func(done int64)
}

// writeInputs writes the inputs archive of plan to w.
func writeInputs(w io.Writer, plan *buildplan.Plan, src inputsSource) error {
	if err := plan.Validate(); err != nil {
		return fmt.Errorf("the build's plan: %w", err)
	}
	b, err := json.Marshal(plan)
	if err != nil {
		return err
	}
	if len(b) > buildplan.MaxPlanBytes {
		return fmt.Errorf("the build's plan is %d bytes, more than %d", len(b), buildplan.MaxPlanBytes)
	}
	tw := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		b    []byte
	}{{buildplan.PlanFile, b}, {plan.Collect, manifest.CollectScript()}, {plan.Modules, manifest.ModulesList()}} {
		if err := tw.WriteHeader(fileHeader(f.name, int64(len(f.b)))); err != nil {
			return err
		}
		if _, err := tw.Write(f.b); err != nil {
			return err
		}
	}
	if src.spool != nil {
		if err := copyTar(tw, src.spool); err != nil {
			return fmt.Errorf("the recipe's inputs: %w", err)
		}
	}
	var done int64
	for i, l := range plan.Layers {
		if err := copyLayer(tw, l, i, src.openLayer); err != nil {
			return err
		}
		if done += l.Size; src.progress != nil {
			src.progress(done)
		}
	}
	return tw.Close()
}

func fileHeader(name string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
}

// copyTar copies the entries of the tar r (the host's own spool) into tw.
func copyTar(tw *tar.Writer, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// copyLayer streams layer i, of l's size exactly, into tw; the stream's
// own check (its digest) must pass at its end.
func copyLayer(tw *tar.Writer, l buildplan.Layer, i int, open func(int) (io.ReadCloser, error)) error {
	if open == nil {
		return fmt.Errorf("layer %d: no source", i+1)
	}
	rc, err := open(i)
	if err != nil {
		return fmt.Errorf("layer %d (%s): %w", i+1, l.Digest, err)
	}
	defer rc.Close()
	if err := tw.WriteHeader(fileHeader(l.File, l.Size)); err != nil {
		return err
	}
	if n, err := io.CopyN(tw, rc, l.Size); err != nil {
		return fmt.Errorf("layer %d (%s): %d of its %d bytes: %w", i+1, l.Digest, n, l.Size, err)
	}
	// Read to the end: the stream checks its digest there, and a layer
	// longer than its descriptor says is refused.
	var one [1]byte
	for {
		n, err := rc.Read(one[:])
		if n > 0 {
			return fmt.Errorf("layer %d (%s) is longer than its %d bytes", i+1, l.Digest, l.Size)
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("layer %d (%s): %w", i+1, l.Digest, err)
		}
	}
}
