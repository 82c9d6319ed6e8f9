package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Dropping the oldest checkpoint. What lies under the one after it must
// stay whole: when that one is a layer, the oldest (a whole image, or a
// layer over the base) becomes the new base, folded with the old base
// into a new whole image (compact.go's composeChain, which checks both
// files against the sums the daemon measured as it reads them). The fold
// writes a new file: a VMM restored from the old base (a branch, the
// sandbox itself) may have it mapped, and sees no change.

// dropOldest drops the chain's oldest checkpoint. The caller holds c.mu.
func (c *ckChain) dropOldest(ctx context.Context) error {
	if len(c.points) == 0 {
		return nil
	}
	p0 := c.points[0]
	var base *ckFile
	if len(c.points) > 1 && !c.points[1].mem.whole() {
		if p0.mem.whole() {
			b := p0.mem
			base = &b
		} else {
			if c.base == nil {
				return fmt.Errorf("checkpoint %d is a layer with no base under it", p0.info.N)
			}
			b, err := foldLayer(ctx, c.base, &p0.mem, filepath.Join(c.dir, "base."+strconv.Itoa(p0.info.N)+".mem"))
			if err != nil {
				return err
			}
			base = b
		}
	}
	if c.base != nil && (base == nil || base.path != c.base.path) {
		os.Remove(c.base.path)
	}
	os.Remove(p0.state)
	if base == nil || base.path != p0.mem.path {
		os.Remove(p0.mem.path)
	}
	c.base = base
	c.points = c.points[1:]
	return nil
}

// foldLayer writes to path the whole image that layer over base
// composes, and returns it measured.
func foldLayer(ctx context.Context, base, layer *ckFile, path string) (_ *ckFile, err error) {
	files := make([]*os.File, 0, 2)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, cf := range []*ckFile{base, layer} {
		f, err := os.Open(cf.path)
		if err != nil {
			return nil, fmt.Errorf("fold a checkpoint: %w", err)
		}
		files = append(files, f)
	}
	tmp := path + ".partial"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fold a checkpoint: %w", err)
	}
	defer func() {
		out.Close()
		if err != nil {
			os.Remove(tmp)
		}
	}()
	sum, err := composeChain(ctx, out, files, []snapshot.Layer{base.layer(), layer.layer()}, base.size, &folding{})
	if err != nil {
		return nil, fmt.Errorf("fold a checkpoint: %w", err)
	}
	if err := out.Close(); err != nil {
		return nil, fmt.Errorf("fold a checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("fold a checkpoint: %w", err)
	}
	return &ckFile{path: path, size: base.size, crc: sum}, nil
}
