package vmm

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

var twoRegions = []snapshot.MemoryRegion{{GuestAddr: 0, Size: 128 * pageSize, FileOffset: 0}, {GuestAddr: 1 << 32, Size: 64 * pageSize, FileOffset: 128 * pageSize}}

func ext(pairs ...uint64) []snapshot.Extent {
	var out []snapshot.Extent
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, snapshot.Extent{Off: pairs[i] * pageSize, Len: pairs[i+1] * pageSize})
	}
	return out
}

// Bitmaps become extents of adjacent pages, never across regions (region
// 0's last page and region 1's first are adjacent in the image), and
// marking the extents again gives the same bitmaps.
func TestDirtyExtents(t *testing.T) {
	bits := newBitmaps(twoRegions)
	bits[0][0] = 1<<0 | 1<<1 | 1<<2 | 1<<10
	bits[0][1] = 1 << 63 // page 127, region 0's last
	bits[1][0] = 1<<0 | 1<<63
	got := dirtyExtents(bits, twoRegions)
	want := ext(0, 3, 10, 1, 127, 1, 128, 1, 128+63, 1)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("extents %v, want %v", got, want)
	}
	again := newBitmaps(twoRegions)
	markExtents(again, twoRegions, got)
	if !reflect.DeepEqual(again, bits) {
		t.Errorf("marking the extents gives %x, want %x", again, bits)
	}
	if n := countPages(got); n != 7 {
		t.Errorf("%d pages, want 7", n)
	}
}

// Coalescing merges the smallest gaps first, keeps every dirty page
// inside an extent, and never merges across regions.
func TestCoalesceExtents(t *testing.T) {
	in := ext(0, 1, 2, 1, 10, 1, 11+20, 1, 127, 1, 128, 1, 130, 1)
	got, err := coalesceExtents(in, twoRegions, 5)
	if err != nil {
		t.Fatal(err)
	}
	// Gaps in region 0: 1 (0|2), 7 (2|10), 20 (10|31), 95 (31|127);
	// region 1: 1 (128|130). The two of 1 page go.
	if want := ext(0, 3, 10, 1, 31, 1, 127, 1, 128, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("coalesced to %v, want %v", got, want)
	}
	got, err = coalesceExtents(in, twoRegions, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := ext(0, 128, 128, 3); !reflect.DeepEqual(got, want) {
		t.Fatalf("coalesced to 2: %v, want %v", got, want)
	}
	if _, err := coalesceExtents(in, twoRegions, 1); err == nil {
		t.Error("two regions' extents coalesced into one")
	}
	if got, _ := coalesceExtents(in, twoRegions, len(in)); !reflect.DeepEqual(got, in) {
		t.Error("extents under the bound changed")
	}
}

// Random dirty bitmaps: the coalesced extents are at most the bound, in
// order and apart, each inside one region, and cover every dirty page.
func TestCoalesceExtentsCoversEveryPage(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	regs := make2Regions()
	for round := range 200 {
		bits := newBitmaps(twoRegions)
		for i, l := range twoRegions {
			for p := range int(l.Size / pageSize) {
				if rng.IntN(4) == 0 {
					bits[i][p/64] |= 1 << (p % 64)
				}
			}
		}
		ext := dirtyExtents(bits, twoRegions)
		max := 2 + rng.IntN(len(ext)+1)
		got, err := coalesceExtents(ext, twoRegions, max)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(got) > max {
			t.Fatalf("round %d: %d extents, bound %d", round, len(got), max)
		}
		var next uint64
		covered := newBitmaps(twoRegions)
		for _, e := range got {
			if e.Off < next || e.Len == 0 || e.Off%pageSize != 0 || e.Len%pageSize != 0 {
				t.Fatalf("round %d: extent %+v after %#x", round, e, next)
			}
			if _, err := extentData(regs, twoRegions, e); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			next = e.Off + e.Len
		}
		markExtents(covered, twoRegions, got)
		for i := range bits {
			for w := range bits[i] {
				if bits[i][w]&^covered[i][w] != 0 {
					t.Fatalf("round %d: region %d word %d: dirty %#x, covered %#x", round, i, w, bits[i][w], covered[i][w])
				}
			}
		}
	}
}

// make2Regions is guest memory laid out as twoRegions.
func make2Regions() []guestmem.Region {
	return []guestmem.Region{{GuestAddr: twoRegions[0].GuestAddr, Data: make([]byte, twoRegions[0].Size)},
		{GuestAddr: twoRegions[1].GuestAddr, Data: make([]byte, twoRegions[1].Size)}}
}
