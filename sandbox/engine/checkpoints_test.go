package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// fakeCkVMM stands in for a VMM that takes checkpoints (checkpointVMM):
// it holds the guest's memory, logs the pages written to it, and writes
// a whole image when asked (or first), else a layer of the pages written
// since, with a state file naming only that layer's extents, as the real
// one does. corrupt, when set, damages what it writes.
type fakeCkVMM struct {
	t       *testing.T
	img     []byte
	dirty   map[int64]bool
	started bool
	fulls   []bool
	err     error
	corrupt func(st *snapshot.State, mem *[]byte)
}

func newFakeCkVMM(t *testing.T) *fakeCkVMM {
	st := chainState(nil, nil)
	f := &fakeCkVMM{t: t, img: make([]byte, st.Machine.ImageSize()), dirty: map[int64]bool{}}
	old := checkpointVMM
	checkpointVMM = f.checkpoint
	t.Cleanup(func() { checkpointVMM = old })
	return f
}

// write is the guest writing b at off.
func (f *fakeCkVMM) write(off int64, b []byte) {
	copy(f.img[off:], b)
	for p := off &^ (pageBytes - 1); p < off+int64(len(b)); p += pageBytes {
		f.dirty[p] = true
	}
}

func (f *fakeCkVMM) checkpoint(ctx context.Context, socket string, state, mem *os.File, full bool) (control.CheckpointStats, error) {
	f.fulls = append(f.fulls, full)
	if f.err != nil {
		return control.CheckpointStats{}, f.err // its log is kept
	}
	st := chainState(nil, nil)
	var data []byte
	if full || !f.started {
		data = slices.Clone(f.img)
	} else {
		pages := make([]int64, 0, len(f.dirty))
		for p := range f.dirty {
			pages = append(pages, p)
		}
		sort.Slice(pages, func(i, j int) bool { return pages[i] < pages[j] })
		for _, p := range pages {
			n := len(st.Machine.Extents)
			if n > 0 && st.Machine.Extents[n-1].Off+st.Machine.Extents[n-1].Len == uint64(p) {
				st.Machine.Extents[n-1].Len += pageBytes
			} else {
				st.Machine.Extents = append(st.Machine.Extents, snapshot.Extent{Off: uint64(p), Len: pageBytes})
			}
			data = append(data, f.img[p:p+pageBytes]...)
		}
	}
	if f.corrupt != nil {
		f.corrupt(st, &data)
	}
	if _, err := mem.WriteAt(data, 0); err != nil {
		return control.CheckpointStats{}, err
	}
	if _, err := state.Write(rawCheckpointState(f.t, st, crc32.Checksum(data, ckCastagnoli))); err != nil {
		return control.CheckpointStats{}, err
	}
	f.started = true
	clear(f.dirty)
	return control.CheckpointStats{Layer: len(st.Machine.Extents) > 0, PauseMS: 1}, nil
}

// State file header (vmm/snapshot's file.go), for a fake VMM that writes
// what snapshot.EncodeCheckpoint would refuse.
const (
	ckHdrSize    = 32
	ckHdrVersion = 8
	ckHdrBodyLen = 16
	ckHdrBodySum = 24
)

var ckCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// rawCheckpointState encodes st as a VMM writes a checkpoint's state
// file, unchecked, so that a test can write a lying one.
func rawCheckpointState(t *testing.T, st *snapshot.State, memSum uint32) []byte {
	body, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	h := make([]byte, ckHdrSize)
	copy(h, snapshot.Magic)
	binary.LittleEndian.PutUint32(h[ckHdrVersion:], snapshot.FormatVersion)
	binary.LittleEndian.PutUint32(h[12:], 1)
	binary.LittleEndian.PutUint64(h[ckHdrBodyLen:], uint64(len(body)))
	binary.LittleEndian.PutUint32(h[ckHdrBodySum:], crc32.Checksum(body, ckCastagnoli))
	binary.LittleEndian.PutUint32(h[28:], memSum)
	return append(h, body...)
}

// ckRig is a sandbox with a chain over a fake VMM, and the images each
// checkpoint should restore.
type ckRig struct {
	t    *testing.T
	m    *VMManager
	s    *vmSandbox
	vmm  *fakeCkVMM
	want map[int][]byte
}

func newCkRig(t *testing.T, keep int, maxBytes int64) *ckRig {
	dir := t.TempDir()
	m := &VMManager{log: slog.New(slog.DiscardHandler)}
	ckDir := filepath.Join(dir, "checkpoints")
	if err := os.Mkdir(ckDir, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &vmSandbox{id: "sb-test", dir: dir, ck: newCkChain(ckDir, sandbox.CheckpointConfig{Keep: keep}, maxBytes)}
	return &ckRig{t: t, m: m, s: s, vmm: newFakeCkVMM(t), want: map[int][]byte{}}
}

func (r *ckRig) record() (sandbox.CheckpointInfo, error) {
	info, err := r.m.recordCheckpoint(context.Background(), r.s, sandbox.CheckpointManual, "")
	r.s.ck.trims.Wait() // the drops past the bounds
	if err == nil {
		r.want[info.N] = slices.Clone(r.vmm.img)
	}
	return info, err
}

func (r *ckRig) mustRecord(n int) sandbox.CheckpointInfo {
	r.t.Helper()
	info, err := r.record()
	if err != nil || info.N != n {
		r.t.Fatalf("checkpoint %d: %+v, %v", n, info, err)
	}
	return info
}

// checkRestores composes each kept checkpoint as a restore would and
// checks the image its VMM would map is the one recorded.
func (r *ckRig) checkRestores() {
	r.t.Helper()
	c := r.s.ck
	for i, p := range c.points {
		dir := r.t.TempDir()
		if err := c.composeInto(i, dir); err != nil {
			r.t.Fatalf("compose checkpoint %d: %v", p.info.N, err)
		}
		got := composedImage(r.t, dir)
		if !bytes.Equal(got, r.want[p.info.N]) {
			r.t.Errorf("checkpoint %d composes another image than was recorded", p.info.N)
		}
	}
}

// composedImage reads the image an image directory's chain composes,
// checking its state file (snapshot.ReadFile) and every file's sum.
func composedImage(t *testing.T, dir string) []byte {
	t.Helper()
	st, err := snapshot.ReadFile(filepath.Join(dir, snapStateFile))
	if err != nil {
		t.Fatalf("composed state: %v", err)
	}
	sf, _ := os.Open(filepath.Join(dir, snapStateFile))
	topSum, err := snapshot.MemorySum(sf)
	sf.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(st.Machine.Layers), snapshot.Layer{Size: st.Machine.MemoryFileSize(), CRC32C: topSum, Extents: st.Machine.Extents})
	var files []*os.File
	for i := range want {
		name := snapMemFile
		if i < len(st.Machine.Layers) {
			name = chainFile(i)
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	out, err := os.Create(filepath.Join(t.TempDir(), "image"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if _, err := composeChain(context.Background(), out, files, want, st.Machine.ImageSize(), &folding{}); err != nil {
		t.Fatalf("compose: %v", err)
	}
	b, err := io.ReadAll(io.NewSectionReader(out, 0, st.Machine.ImageSize()))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Checkpoints: the first a whole image, the next layers of what the guest
// wrote; each composes to the memory it was recorded with, and its depth
// says how many files that takes.
func TestCheckpointChain(t *testing.T) {
	r := newCkRig(t, 8, 0)
	r.vmm.write(0, []byte("boot"))
	if in := r.mustRecord(1); in.Depth != 1 {
		t.Errorf("first checkpoint depth %d, want 1 (whole)", in.Depth)
	}
	r.vmm.write(5*pageBytes, []byte("x=1"))
	r.mustRecord(2)
	r.vmm.write(5*pageBytes, []byte("x=2"))
	r.vmm.write(9*pageBytes+100, bytes.Repeat([]byte{7}, 3*pageBytes))
	in := r.mustRecord(3)
	if in.Depth != 3 {
		t.Errorf("third checkpoint depth %d, want 3", in.Depth)
	}
	if l := r.s.ck.points[2].mem; l.whole() || l.size != 5*pageBytes {
		t.Errorf("third checkpoint holds %d bytes (whole %v), want a layer of the 5 pages written", l.size, l.whole())
	}
	if !slices.Equal(r.vmm.fulls, []bool{true, false, false}) {
		t.Errorf("whole images asked %v, want only the first", r.vmm.fulls)
	}
	r.checkRestores()
	if got := r.s.ck.infos(); len(got) != 3 || got[0].SizeBytes <= 0 {
		t.Errorf("infos %+v", got)
	}
}

// Past keep the oldest go, folded into a new base, and every checkpoint
// kept still composes to its memory; no file of a dropped one is left.
func TestCheckpointKeepFolds(t *testing.T) {
	r := newCkRig(t, 2, 0)
	for n := 1; n <= 5; n++ {
		r.vmm.write(int64(n)*pageBytes, []byte{byte(n), 1, 2, 3})
		r.mustRecord(n)
	}
	c := r.s.ck
	if len(c.points) != 2 || c.points[0].info.N != 4 || c.base == nil {
		t.Fatalf("kept %d (first %d), base %v; want 4 and 5 over a folded base", len(c.points), c.points[0].info.N, c.base)
	}
	r.checkRestores()
	ents, _ := os.ReadDir(c.dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	want := []string{filepath.Base(c.base.path), "4.mem", "4.state", "5.mem", "5.state"}
	sort.Strings(want)
	if !slices.Equal(names, want) {
		t.Errorf("checkpoint directory holds %v, want %v", names, want)
	}
}

// Past the disk budget the oldest go, down to one kept.
func TestCheckpointBudget(t *testing.T) {
	r := newCkRig(t, 10, 1) // one byte: nothing fits
	for n := 1; n <= 3; n++ {
		r.vmm.write(int64(n)*pageBytes, []byte{byte(n)})
		r.mustRecord(n)
	}
	if len(r.s.ck.points) != 1 || r.s.ck.points[0].info.N != 3 {
		t.Fatalf("kept %d checkpoints, want only the newest", len(r.s.ck.points))
	}
	r.checkRestores()
}

// What a VMM writes is checked, not believed: a layer where a whole image
// was asked for, extents past the memory or out of order, a memory file of
// another size than its extents, a chain of its own, a damaged state file.
// Each is refused with nothing left behind, and the next checkpoint asks
// for a whole image (the refused one took its pages out of the VMM's log).
func TestCheckpointRefusesBadVMM(t *testing.T) {
	cases := map[string]func(st *snapshot.State, mem *[]byte){
		"extent past memory": func(st *snapshot.State, mem *[]byte) {
			st.Machine.Extents = []snapshot.Extent{{Off: uint64(st.Machine.ImageSize()), Len: pageBytes}}
		},
		"extents out of order": func(st *snapshot.State, mem *[]byte) {
			st.Machine.Extents = []snapshot.Extent{{Off: 8 * pageBytes, Len: pageBytes}, {Off: 0, Len: pageBytes}}
			*mem = make([]byte, 2*pageBytes)
		},
		"file longer than extents": func(st *snapshot.State, mem *[]byte) { *mem = append(*mem, make([]byte, pageBytes)...) },
		"a chain of its own": func(st *snapshot.State, mem *[]byte) {
			st.Machine.Layers = []snapshot.Layer{{Size: st.Machine.ImageSize()}}
		},
		"too many extents": func(st *snapshot.State, mem *[]byte) {
			st.Machine.Extents = nil
			for i := range maxCheckpointExtents + 1 {
				st.Machine.Extents = append(st.Machine.Extents, snapshot.Extent{Off: uint64(2 * i * pageBytes), Len: pageBytes})
			}
			*mem = make([]byte, (maxCheckpointExtents+1)*pageBytes)
		},
		"bad machine": func(st *snapshot.State, mem *[]byte) { st.Machine.VCPUs = 0 },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			r := newCkRig(t, 8, 0)
			r.mustRecord(1)
			r.vmm.write(3*pageBytes, []byte("y"))
			r.vmm.corrupt = corrupt
			if _, err := r.record(); err == nil {
				t.Fatal("a bad checkpoint was kept")
			}
			if ents, _ := os.ReadDir(r.s.ck.dir); len(ents) != 2 {
				t.Errorf("the refused checkpoint left files: %d in the directory", len(ents))
			}
			r.vmm.corrupt = nil
			r.vmm.write(4*pageBytes, []byte("z"))
			r.mustRecord(2)
			if !r.vmm.fulls[len(r.vmm.fulls)-1] {
				t.Error("the checkpoint after a refused one did not ask for a whole image")
			}
			r.checkRestores()
		})
	}
	t.Run("layer when whole asked", func(t *testing.T) {
		r := newCkRig(t, 8, 0)
		r.vmm.corrupt = func(st *snapshot.State, mem *[]byte) {
			st.Machine.Extents = []snapshot.Extent{{Off: 3 * pageBytes, Len: pageBytes}}
			*mem = (*mem)[3*pageBytes : 4*pageBytes]
		}
		if _, err := r.record(); err == nil || !strings.Contains(err.Error(), "whole image was asked") {
			t.Fatalf("a layer as the first checkpoint: %v", err)
		}
	})
	t.Run("damaged state", func(t *testing.T) {
		st := chainState(nil, nil)
		b := rawCheckpointState(t, st, 0)
		b[len(b)-2] ^= 1
		if _, err := snapshot.DecodeCheckpoint(bytes.NewReader(b), st.Machine.ImageSize()); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("damaged body: %v", err)
		}
		if _, err := snapshot.DecodeCheckpoint(bytes.NewReader(b[:10]), st.Machine.ImageSize()); err == nil {
			t.Error("a cut header was read")
		}
	})
}

// A VMM's failure (a full disk) is an error that says so; nothing is
// kept, the chain is as it was, and the next checkpoint is whole.
func TestCheckpointVMMFailure(t *testing.T) {
	r := newCkRig(t, 8, 0)
	r.mustRecord(1)
	r.vmm.err = &control.Error{Code: control.CodeNoSpace, Msg: "no space left on device"}
	if _, err := r.record(); !errors.Is(err, sandbox.ErrFull) {
		t.Fatalf("a checkpoint on a full disk: %v, want ErrFull", err)
	}
	r.vmm.err = nil
	r.vmm.write(2*pageBytes, []byte("after"))
	r.mustRecord(2)
	if !r.vmm.fulls[2] {
		t.Error("the checkpoint after a failed one did not ask for a whole image")
	}
	r.checkRestores()
}

// A restore of checkpoint k drops those after it (dropAfter) and the next
// is k+1; an undo's target is the one before the last.
func TestCheckpointDropAfter(t *testing.T) {
	r := newCkRig(t, 8, 0)
	for n := 1; n <= 4; n++ {
		r.vmm.write(int64(n)*pageBytes, []byte{byte(n)})
		r.mustRecord(n)
	}
	c := r.s.ck
	i := c.find(2)
	c.dropAfter(i)
	c.next = 3
	if len(c.points) != 2 {
		t.Fatalf("kept %d after dropping past 2", len(c.points))
	}
	for _, n := range []int{3, 4} {
		if _, err := os.Stat(c.memPath(n)); !os.IsNotExist(err) {
			t.Errorf("checkpoint %d's memory file is still there: %v", n, err)
		}
	}
	if c.find(9) != -1 {
		t.Error("found a checkpoint never recorded")
	}
	r.checkRestores()
}

// A chain is over its bounds past Keep, and when a restore of the newest
// would compose more than maxCheckpointChain files or maxChainExtents
// extents, whatever Keep allows.
func TestCheckpointChainBounds(t *testing.T) {
	c := newCkChain(t.TempDir(), sandbox.CheckpointConfig{Keep: sandbox.MaxCheckpointKeep}, 0)
	c.base = &ckFile{path: "base"}
	layer := func(n, extents int) *ckPoint {
		return &ckPoint{info: sandbox.CheckpointInfo{N: n}, mem: ckFile{ext: make([]snapshot.Extent, extents)}}
	}
	for n := 1; n <= 4; n++ {
		c.points = append(c.points, layer(n, maxCheckpointExtents))
	}
	if files, extents, err := c.chainBounds(3); err != nil || files != 5 || extents != 4*maxCheckpointExtents {
		t.Fatalf("chain of base and 4 layers: %d files, %d extents, %v", files, extents, err)
	}
	if c.over() {
		t.Fatal("4 layers of 1024 extents are over the bounds")
	}
	for n := 5; n <= 17; n++ {
		c.points = append(c.points, layer(n, maxCheckpointExtents))
	}
	if !c.over() {
		t.Errorf("%d extents in the newest's chain are not over the bound of %d", 17*maxCheckpointExtents, maxChainExtents)
	}
	c.points = c.points[:4]
	c.cfg.Keep = 3
	if !c.over() {
		t.Error("4 checkpoints are not over keep 3")
	}
	c.cfg.Keep = sandbox.MaxCheckpointKeep
	c.points[2].mem.ext = nil // a whole image: the chain under 4 starts there
	if files, _, _ := c.chainBounds(3); files != 2 {
		t.Errorf("the newest over a whole image composes %d files, want 2", files)
	}
	c.base = nil
	c.points[2].mem.ext = []snapshot.Extent{}
	if _, _, err := c.chainBounds(3); err == nil {
		t.Error("a chain with nothing whole under it composes")
	}
}

// A manager's start drops what an earlier one left in its checkpoint
// directory: no sandbox of its own holds it.
func TestCheckpointDirSweptAtStart(t *testing.T) {
	ck := t.TempDir()
	stale := filepath.Join(ck, "sb-0123456789ab")
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stale, "1.mem"), []byte("old"), 0o600)
	newPausableManager(t, func(o *Options) { o.CheckpointDir = ck })
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("an earlier daemon's checkpoints are still there: %v", err)
	}
}
