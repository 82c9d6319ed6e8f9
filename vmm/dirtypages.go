package vmm

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A checkpoint's dirty pages: one bitmap per memory region (= KVM slot),
// in KVM's layout (bit p of word p/64 is the region's page p), the union
// of KVM's dirty log and the devices' (guestmem's dirty.go), turned into
// the extents of a layer, at most snapshot.MaxCheckpointExtents of them.

// dirtyExtents lists the extents of the image (laid out as layout says)
// whose pages bits marks, adjacent pages in one extent and none across
// regions, in order.
func dirtyExtents(bits [][]uint64, layout []snapshot.MemoryRegion) []snapshot.Extent {
	var out []snapshot.Extent
	for i, l := range layout {
		if i >= len(bits) {
			break
		}
		last := -2
		kvm.DirtyPages(bits[i], int(l.Size/pageSize), func(p int) {
			if p == last+1 {
				out[len(out)-1].Len += pageSize
			} else {
				out = append(out, snapshot.Extent{Off: l.FileOffset + uint64(p)*pageSize, Len: pageSize})
			}
			last = p
		})
	}
	return out
}

// markExtents sets in bits the pages of ext (image offsets, each inside
// one region of layout; others are skipped).
func markExtents(bits [][]uint64, layout []snapshot.MemoryRegion, ext []snapshot.Extent) {
	for _, e := range ext {
		for i, l := range layout {
			if i >= len(bits) || e.Off < l.FileOffset || e.Off-l.FileOffset >= l.Size || e.Len > l.Size-(e.Off-l.FileOffset) {
				continue
			}
			for p := (e.Off - l.FileOffset) / pageSize; p < (e.Off-l.FileOffset+e.Len)/pageSize; p++ {
				bits[i][p/64] |= 1 << (p % 64)
			}
		}
	}
}

// coalesceExtents merges extents of one region across the smallest gaps
// between them until at most max remain: the clean pages a merge takes
// in are the same in the layer as under it, so the layer stays correct,
// only larger. Extents in different regions are never merged; an error
// when they alone are more than max.
func coalesceExtents(ext []snapshot.Extent, layout []snapshot.MemoryRegion, max int) ([]snapshot.Extent, error) {
	if len(ext) <= max {
		return ext, nil
	}
	region := func(e snapshot.Extent) int {
		for i, l := range layout {
			if e.Off >= l.FileOffset && e.Off-l.FileOffset < l.Size {
				return i
			}
		}
		return -1
	}
	type gap struct {
		at   int // between ext[at] and ext[at+1]
		size uint64
	}
	var gaps []gap
	for i := 0; i+1 < len(ext); i++ {
		if r := region(ext[i]); r >= 0 && r == region(ext[i+1]) {
			gaps = append(gaps, gap{i, ext[i+1].Off - (ext[i].Off + ext[i].Len)})
		}
	}
	need := len(ext) - max
	if len(gaps) < need {
		return nil, fmt.Errorf("%d dirty extents in regions that make %d at least, more than %d", len(ext), len(ext)-len(gaps), max)
	}
	slices.SortStableFunc(gaps, func(a, b gap) int { return cmp.Compare(a.size, b.size) })
	merge := make([]bool, len(ext))
	for _, g := range gaps[:need] {
		merge[g.at] = true
	}
	out := make([]snapshot.Extent, 0, max)
	for i, e := range ext {
		if i > 0 && merge[i-1] {
			last := &out[len(out)-1]
			last.Len = e.Off + e.Len - last.Off
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// newBitmaps is an empty bitmap per region of layout.
func newBitmaps(layout []snapshot.MemoryRegion) [][]uint64 {
	out := make([][]uint64, len(layout))
	for i, l := range layout {
		out[i] = make([]uint64, kvm.DirtyBitmapWords(l.Size))
	}
	return out
}

// orBitmaps ORs src into dst, region by region.
func orBitmaps(dst [][]uint64, i int, src []uint64) {
	for w := range min(len(dst[i]), len(src)) {
		dst[i][w] |= src[w]
	}
}

// countPages counts the pages of ext.
func countPages(ext []snapshot.Extent) int64 { return snapshot.ExtentsSize(ext) / pageSize }
