package vmm

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// chainLayout is two regions of 32 pages each, as a machine's are (the
// image's regions end to end).
var chainLayout = []snapshot.MemoryRegion{
	{GuestAddr: 0, Size: 32 * pageSize, FileOffset: 0},
	{GuestAddr: 1 << 32, Size: 32 * pageSize, FileOffset: 32 * pageSize},
}

func page(b byte) []byte { return bytes.Repeat([]byte{b}, pageSize) }

// restored maps the chain st names (mem its own memory file, layers the
// files under it) as a restore does, and returns its memory and source.
func restored(t *testing.T, st *snapshot.State, mem *os.File, layers ...*os.File) (*guestmem.Regions, *memSource) {
	t.Helper()
	if err := checkChainFiles(st, mem, layers); err != nil {
		t.Fatal(err)
	}
	sum, _, err := snapshot.SumFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	src, err := newChainSource(st, mem, layers, sum, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.close() })
	regs, unmap, err := mapMemoryChain(src, st.Machine.Memory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unmap)
	for _, r := range regs.List() {
		unix.Madvise(r.Data, unix.MADV_NOHUGEPAGE)
	}
	return regs, src
}

// saveLayer saves mem as a layer over src's chain into a new file, as
// SaveLayer does, and returns the file, the state that names the chain,
// and the stats.
func saveLayer(t *testing.T, m *Machine, name string) (*os.File, *snapshot.State, memWriteStats) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st := &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout}}
	stats, err := m.writeMemoryOrLayer(f, &st.Machine, true)
	if err != nil {
		t.Fatal(err)
	}
	if sum, size, err := snapshot.SumFile(f); err != nil || sum != stats.Sum || size != st.Machine.MemoryFileSize() {
		t.Fatalf("the layer sums to %08x (%d bytes), the save says %08x (%d bytes): %v", sum, size, stats.Sum, st.Machine.MemoryFileSize(), err)
	}
	return f, st, stats
}

func image(mem *guestmem.Regions) []byte {
	var b []byte
	for _, r := range mem.List() {
		b = append(b, r.Data...)
	}
	return b
}

// A machine restored from its own image saves only the pages the guest
// wrote (not those it read) into a layer; the chain composes back to the
// guest's memory, region boundaries included; a second save over the
// chain does the same; a layer's pages stay private to the restored
// guest; and a whole save of the chain (flattening it) writes the image a
// save that reads every page writes, copying untouched pages from the
// layer that holds them.
func TestLayerSavesOnlyWrittenPagesAndComposes(t *testing.T) {
	pm := openPagemap(t)
	base, err := os.Create(filepath.Join(t.TempDir(), "base"))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	base.Truncate(64 * pageSize)
	for _, p := range []int{1, 2, 10, 31, 32, 40} {
		base.WriteAt(page(byte('A'+p%26)), int64(p*pageSize))
	}
	st0 := &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout}}
	mem0, src0 := restored(t, st0, base)
	m := &Machine{mem: mem0, memSrc: src0, log: slog.New(slog.DiscardHandler)}
	m.cfg.Pagemap = pm
	// Written: 2 and 3 (one extent), 31 and 32 (two: the region ends
	// between them), 50 (over a hole). Read: 10, 40, 60.
	for _, off := range []uint64{2*pageSize + 7, 3 * pageSize, 31 * pageSize, 32*pageSize + 1, 50 * pageSize} {
		mem0.WriteAt([]byte("guest"), chainAddr(off))
	}
	var sink byte
	for _, p := range []int{10, 40, 60} {
		b := make([]byte, 1)
		mem0.ReadAt(b, chainAddr(uint64(p*pageSize)))
		sink += b[0]
	}
	l1, st1, stats := saveLayer(t, m, "layer1")
	wantExt := []snapshot.Extent{{Off: 2 * pageSize, Len: 2 * pageSize}, {Off: 31 * pageSize, Len: pageSize}, {Off: 32 * pageSize, Len: pageSize}, {Off: 50 * pageSize, Len: pageSize}}
	if !reflect.DeepEqual(st1.Machine.Extents, wantExt) {
		t.Fatalf("layer extents %+v, want %+v (the pages written, not those read: %d)", st1.Machine.Extents, wantExt, sink)
	}
	if stats.FromMemory != 5*pageSize || stats.FromSource != 0 {
		t.Errorf("the layer save wrote %d bytes from memory and copied %d, want 5 pages and none", stats.FromMemory, stats.FromSource)
	}
	if len(st1.Machine.Layers) != 1 || st1.Machine.Layers[0].Size != 64*pageSize {
		t.Fatalf("the layer names %+v under it, want the base", st1.Machine.Layers)
	}

	mem1, src1 := restored(t, st1, l1, base)
	if !bytes.Equal(image(mem1), image(mem0)) {
		t.Fatal("the composed chain differs from the guest's memory it was saved from")
	}
	m1 := &Machine{mem: mem1, memSrc: src1, log: slog.New(slog.DiscardHandler)}
	m1.cfg.Pagemap = pm
	mem1.WriteAt([]byte("again"), chainAddr(3*pageSize+9)) // a page of layer 1
	mem1.WriteAt([]byte("new"), chainAddr(20*pageSize))
	l2, st2, stats := saveLayer(t, m1, "layer2")
	if stats.FromMemory != 2*pageSize || len(st2.Machine.Layers) != 2 {
		t.Fatalf("the second layer wrote %d bytes over %d files, want 2 pages over 2", stats.FromMemory, len(st2.Machine.Layers))
	}
	mem2, src2 := restored(t, st2, l2, base, l1)
	if !bytes.Equal(image(mem2), image(mem1)) {
		t.Fatal("the composed chain of three differs from the guest's memory")
	}
	mem2.WriteAt([]byte("private"), chainAddr(2*pageSize))
	mem2.WriteAt([]byte("private"), chainAddr(3*pageSize))
	for _, f := range []*os.File{l1, l2} {
		b, _ := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
		if bytes.Contains(b, []byte("private")) {
			t.Fatalf("a write to the restored guest reached %s", f.Name())
		}
	}

	_ = src2
	// A fresh restore of the chain, whose untouched pages a whole save
	// copies from the file that holds each.
	mem3, src3 := restored(t, st2, l2, base, l1)
	mem3.WriteAt([]byte("flat"), chainAddr(33*pageSize))
	m2 := &Machine{mem: mem3, memSrc: src3, log: slog.New(slog.DiscardHandler)}
	m2.cfg.Pagemap = pm
	flat, err := os.Create(filepath.Join(t.TempDir(), "flat"))
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Close()
	fst := &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout}}
	stats, err = m2.writeMemoryOrLayer(flat, &fst.Machine, false)
	if err != nil {
		t.Fatal(err)
	}
	if fst.Machine.Layered() || stats.FromSource == 0 {
		t.Fatalf("a whole save: layered=%v, %d bytes copied from the chain", fst.Machine.Layered(), stats.FromSource)
	}
	got, _ := os.ReadFile(flat.Name())
	if full := writeAndRead(t, mem3, chainLayout, nil, nil); !bytes.Equal(got, full) {
		t.Error("the flattened chain differs from a save that reads every page")
	}
}

// chainAddr is the guest address of image offset off in chainLayout.
func chainAddr(off uint64) uint64 {
	for _, r := range chainLayout {
		if off >= r.FileOffset && off < r.FileOffset+r.Size {
			return r.GuestAddr + off - r.FileOffset
		}
	}
	panic("off the image")
}

// A restore reads no extents (a fork that never saves would walk its file
// for nothing); the first save that needs them reads them once.
func TestExtentsAreReadOnceByTheFirstSave(t *testing.T) {
	pm := openPagemap(t)
	base, err := os.Create(filepath.Join(t.TempDir(), "base"))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	base.Truncate(64 * pageSize)
	base.WriteAt(page('x'), 5*pageSize)
	before := extentWalks.Load()
	mem, src := restored(t, &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout}}, base)
	if n := extentWalks.Load() - before; n != 0 {
		t.Fatalf("a restore walked the memory file's extents %d times, want none", n)
	}
	for i := range 2 {
		writeAndRead(t, mem, chainLayout, pm, src)
		if n := extentWalks.Load() - before; n != 1 {
			t.Fatalf("after save %d the extents were walked %d times, want once", i+1, n)
		}
	}
}

// A chain at its bound is flattened, and a layer whose changes are too
// scattered is written whole.
func TestLayerFallsBackToAWholeImage(t *testing.T) {
	pm := openPagemap(t)
	base, err := os.Create(filepath.Join(t.TempDir(), "base"))
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	base.Truncate(64 * pageSize)
	mem, src := restored(t, &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout}}, base)
	for p := 0; p < 64; p += 2 {
		mem.WriteAt([]byte{1}, chainAddr(uint64(p*pageSize)))
	}
	if _, err := layerExtents(mem, chainLayout, pm, 31); !errors.Is(err, errScattered) {
		t.Fatalf("32 extents with a bound of 31: %v, want errScattered", err)
	}
	m := &Machine{mem: mem, memSrc: src, log: slog.New(slog.DiscardHandler)}
	m.cfg.Pagemap = pm
	for len(src.chain) < snapshot.MaxLayers {
		src.chain = append(src.chain, snapshot.Layer{})
	}
	f, st, _ := saveLayer(t, m, "flat")
	if st.Machine.Layered() {
		t.Fatalf("a save over a chain of %d files wrote a layer", len(src.chain))
	}
	if fi, _ := f.Stat(); fi.Size() != 64*pageSize {
		t.Fatalf("the flattened image is %d bytes", fi.Size())
	}
	m.cfg.Pagemap = nil
	src.chain = src.chain[:1]
	if _, st, _ := saveLayer(t, m, "nopm"); st.Machine.Layered() {
		t.Fatal("a save with no page map wrote a layer")
	}
}

// A restore refuses a chain with a file missing or out of order (by
// size; the daemon checks sums).
func TestRestoreRefusesABrokenChain(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, size int64) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.Truncate(size)
		return f
	}
	base, l1, top := mk("base", 64*pageSize), mk("l1", 2*pageSize), mk("top", pageSize)
	st := &snapshot.State{Machine: snapshot.Machine{Memory: chainLayout,
		Layers:  []snapshot.Layer{{Size: 64 * pageSize}, {Size: 2 * pageSize, Extents: []snapshot.Extent{{Off: 0, Len: 2 * pageSize}}}},
		Extents: []snapshot.Extent{{Off: 9 * pageSize, Len: pageSize}}}}
	if err := checkChainFiles(st, top, []*os.File{base, l1}); err != nil {
		t.Fatalf("a good chain: %v", err)
	}
	for name, c := range map[string]struct {
		top    *os.File
		layers []*os.File
		want   string
	}{
		"missing a layer": {top, []*os.File{base}, "chain of 3 files, 2 were given"},
		"reordered":       {top, []*os.File{l1, base}, "broken or out of order"},
		"a layer as top":  {l1, []*os.File{base, top}, "broken or out of order"},
	} {
		if err := checkChainFiles(st, c.top, c.layers); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
