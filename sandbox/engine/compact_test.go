package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// testChain is a pause chain of three files: a base with holes, a layer
// over it, and the image's own memory file over both. Its extents cross
// the fold's chunks, and one writes a page of zeros over the base's data.
type testChain struct {
	image []byte // the memory a restore composes
}

func fill(b []byte, v byte) []byte {
	for i := range b {
		b[i] = v + byte(i/4096)
	}
	return b
}

// writeTestChain writes the chain as the pause image in dir/paused.
func writeTestChain(t *testing.T, dir string) testChain {
	t.Helper()
	paused := filepath.Join(dir, pausedDir)
	if err := os.MkdirAll(paused, 0o700); err != nil {
		t.Fatal(err)
	}
	size := chainState(nil, nil).Machine.ImageSize()
	const mib = 1 << 20
	base := make([]byte, size)
	fill(base[:64<<10], 1)
	fill(base[mib-8192:mib+8192], 2)
	fill(base[size-4096:], 3)
	l1Ext := []snapshot.Extent{{Off: 4096, Len: 8192}, {Off: mib - 4096, Len: 8192}, {Off: 5 * mib, Len: 3 * mib}}
	l1 := make([]byte, snapshot.ExtentsSize(l1Ext))
	fill(l1[:8192], 0x11) // the second extent stays zeros: over the base's data
	fill(l1[16384:], 0x22)
	topExt := []snapshot.Extent{{Off: 0, Len: 8192}, {Off: 6 * mib, Len: 4096}}
	top := fill(make([]byte, snapshot.ExtentsSize(topExt)), 0x33)

	writeSparse := func(name string, b []byte) snapshot.Layer {
		f, err := os.Create(filepath.Join(paused, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := writeNonZero(f, b, 0); err != nil {
			t.Fatal(err)
		}
		f.Truncate(int64(len(b)))
		sum, n, err := snapshot.SumFile(f)
		if err != nil || n != int64(len(b)) {
			t.Fatal(n, err)
		}
		return snapshot.Layer{Size: n, CRC32C: sum}
	}
	lb := writeSparse(chainFile(0), base)
	ll := writeSparse(chainFile(1), l1)
	ll.Extents = l1Ext
	lt := writeSparse(snapMemFile, top)
	var b bytes.Buffer
	if err := snapshot.EncodeWithMemory(&b, chainState([]snapshot.Layer{lb, ll}, topExt), lt.CRC32C); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(paused, snapStateFile), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return testChain{image: composeRef(base, [][]byte{l1, top}, [][]snapshot.Extent{l1Ext, topExt})}
}

// composeRef is what a restore maps: the base, each layer's extents over
// it in turn (the fold's reference, written plainly).
func composeRef(base []byte, layers [][]byte, ext [][]snapshot.Extent) []byte {
	img := bytes.Clone(base)
	for i, l := range layers {
		at := uint64(0)
		for _, e := range ext[i] {
			copy(img[e.Off:e.Off+e.Len], l[at:at+e.Len])
			at += e.Len
		}
	}
	return img
}

// fakeRestoreRealImage is the pausable fake VMM's restore of a real
// machine image (a test put one in place of its own): it composes the
// memory from the files it was given, as the VMM maps them, and answers
// its sum as the variable memsum. real is false for the fake's own
// images.
func fakeRestoreRealImage(spec control.Spec, files control.Files) (img fakeImage, real bool, err error) {
	state := files[control.SlotRestoreState]
	magic := make([]byte, len(snapshot.Magic))
	if _, err := state.ReadAt(magic, 0); err != nil || string(magic) != snapshot.Magic {
		return img, false, nil
	}
	st, err := snapshot.Decode(io.NewSectionReader(state, 0, math.MaxInt64))
	if err != nil {
		return img, true, err
	}
	if len(st.Machine.Layers) != spec.Restore.Layers {
		return img, true, fmt.Errorf("the state names %d layers, the spec %d", len(st.Machine.Layers), spec.Restore.Layers)
	}
	var chain []*os.File
	for i := range st.Machine.Layers {
		chain = append(chain, files[control.LayerSlot(i)])
	}
	chain = append(chain, files[control.SlotRestoreMemory])
	var data [][]byte
	for _, f := range chain {
		b, err := io.ReadAll(io.NewSectionReader(f, 0, math.MaxInt64))
		if err != nil {
			return img, true, err
		}
		data = append(data, b)
	}
	var ext [][]snapshot.Extent
	for _, l := range st.Machine.Layers[min(1, len(st.Machine.Layers)):] {
		ext = append(ext, l.Extents)
	}
	ext = append(ext, st.Machine.Extents)
	mem := data[0]
	if len(data) > 1 {
		mem = composeRef(data[0], data[1:], ext)
	}
	return fakeImage{Vars: map[string]string{"memsum": fmt.Sprintf("%08x", crc32c(mem))}}, true, nil
}

// A fold writes the whole image the chain composes, with a state file
// that names no chain and the image's sum, and leaves no chain file and
// no fold directory; a whole image is not folded.
func TestFoldPauseChain(t *testing.T) {
	dir := t.TempDir()
	c := writeTestChain(t, dir)
	paused := filepath.Join(dir, pausedDir)
	folded, err := foldImage(context.Background(), dir, &folding{})
	if err != nil || !folded {
		t.Fatalf("fold = %v, %v", folded, err)
	}
	got, err := os.ReadFile(filepath.Join(paused, snapMemFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, c.image) {
		t.Fatal("the folded memory file is not the image the chain composes")
	}
	st, err := snapshot.ReadFile(filepath.Join(paused, snapStateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Machine.Layered() || len(st.Machine.Extents) != 0 {
		t.Errorf("the folded state names a chain: %+v", st.Machine.Layers)
	}
	f, _ := os.Open(filepath.Join(paused, snapStateFile))
	defer f.Close()
	if sum, err := snapshot.MemorySum(f); err != nil || sum != crc32c(c.image) {
		t.Errorf("the folded state's memory sum %08x (%v), the image's %08x", sum, err, crc32c(c.image))
	}
	if left, _ := filepath.Glob(filepath.Join(paused, "layer.*")); len(left) != 0 {
		t.Errorf("the fold left %q", left)
	}
	for _, d := range []string{foldDir, prefoldDir} {
		if _, err := os.Stat(filepath.Join(dir, d)); err == nil {
			t.Errorf("the fold left %s", d)
		}
	}
	if folded, err := foldImage(context.Background(), dir, &folding{}); folded || err != nil {
		t.Errorf("a whole image folded again: %v, %v", folded, err)
	}
}

// filesOf is the bytes of every file in dir, by name.
func filesOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}

// A fold of a damaged chain, or one cancelled, leaves the image as it was
// and nothing beside it.
func TestFoldLeavesTheImageOnFailure(t *testing.T) {
	for _, tc := range []string{"damaged base", "damaged layer", "cancelled"} {
		t.Run(tc, func(t *testing.T) {
			dir := t.TempDir()
			writeTestChain(t, dir)
			paused := filepath.Join(dir, pausedDir)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			switch tc {
			case "damaged base":
				f, _ := os.OpenFile(filepath.Join(paused, chainFile(0)), os.O_WRONLY, 0)
				f.WriteAt([]byte("rot"), 20<<20) // in a hole, which no layer covers
				f.Close()
			case "damaged layer":
				f, _ := os.OpenFile(filepath.Join(paused, chainFile(1)), os.O_WRONLY, 0)
				f.WriteAt([]byte{0}, 100)
				f.Close()
			case "cancelled":
				foldHook = func(int64) { cancel() }
				defer func() { foldHook = nil }()
			}
			before := filesOf(t, paused)
			folded, err := foldImage(ctx, dir, &folding{})
			if folded || err == nil {
				t.Fatalf("fold = %v, %v", folded, err)
			}
			if tc != "cancelled" && !errors.Is(err, errImageCorrupt) {
				t.Errorf("fold of a %s: %v, want errImageCorrupt", tc, err)
			}
			after := filesOf(t, paused)
			if len(after) != len(before) {
				t.Fatalf("the image's files changed: %d, then %d", len(before), len(after))
			}
			for n, b := range before {
				if after[n] != b {
					t.Errorf("the fold changed %s", n)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, foldDir)); err == nil {
				t.Error("a failed fold left its directory")
			}
		})
	}
}

// A daemon that died mid-fold left its directories: at start, a fold
// directory goes, and an image moved aside by a fold without an atomic
// exchange is put back (or, once the folded one is in place, removed).
func TestRecoverFold(t *testing.T) {
	dir := t.TempDir()
	paused, fold, pre := filepath.Join(dir, pausedDir), filepath.Join(dir, foldDir), filepath.Join(dir, prefoldDir)
	writeTestChain(t, dir)
	os.Mkdir(fold, 0o700)
	os.WriteFile(filepath.Join(fold, snapMemFile), []byte("half"), 0o600)
	recoverFold(dir)
	if _, err := os.Stat(fold); err == nil {
		t.Error("a half-written fold was kept")
	}
	if imageChain(paused) != 2 {
		t.Error("the chain was not kept")
	}
	// Moved aside, the folded one not yet in place.
	os.Rename(paused, pre)
	recoverFold(dir)
	if imageChain(paused) != 2 {
		t.Error("the image moved aside was not put back")
	}
	// Both in place: the folded image stays, the old one goes.
	os.Mkdir(pre, 0o700)
	recoverFold(dir)
	if _, err := os.Stat(pre); err == nil || imageChain(paused) != 2 {
		t.Errorf("the image moved aside was kept beside the folded one (%v)", err)
	}
}

// sandboxOf is the manager's record of sandbox id.
func sandboxOf(t *testing.T, m *VMManager, id string) *vmSandbox {
	t.Helper()
	s, err := m.get(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pauseWithChain pauses a new sandbox and puts the test chain in place of
// its (fake) image; it returns the sandbox and the composed memory's sum,
// as the fake VMM's restore answers it (memsum).
func pauseWithChain(t *testing.T, m *VMManager) (*vmSandbox, string) {
	t.Helper()
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	s := sandboxOf(t, m, info.ID)
	if s.fold != nil {
		t.Fatal("the fake's whole image is being folded")
	}
	os.RemoveAll(filepath.Join(s.dir, pausedDir))
	c := writeTestChain(t, s.dir)
	return s, fmt.Sprintf("%08x", crc32c(c.image))
}

// gatedFold makes folds wait at their first chunk until the returned
// release is called; reached is closed when one gets there.
func gatedFold(t *testing.T) (reached chan struct{}, release func()) {
	reached, gate := make(chan struct{}), make(chan struct{})
	var once, rel sync.Once
	foldHook = func(int64) {
		once.Do(func() { close(reached) })
		<-gate
	}
	release = func() { rel.Do(func() { close(gate) }) }
	t.Cleanup(func() { release(); foldHook = nil })
	return reached, release
}

// A paused sandbox's chain is folded in the background; a resume then
// restores the whole image, with the same memory the chain composed.
// A resume during a fold cancels it and restores the chain; a delete
// during a fold ends it, and nothing is left.
func TestFoldWithResumeAndDelete(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	ctx := context.Background()

	t.Run("folded, then resumed", func(t *testing.T) {
		s, want := pauseWithChain(t, m)
		s.life.Lock()
		m.startFold(s)
		s.life.Unlock()
		f := s.fold
		if f == nil {
			t.Fatal("no fold started for a chain")
		}
		<-f.done
		if n := imageChain(filepath.Join(s.dir, pausedDir)); n != 0 {
			t.Fatalf("after the fold the image is a chain of %d", n+1)
		}
		if got := cellText(t, m, s.id, "memsum"); got != want {
			t.Errorf("the resumed guest's memory sums to %s, the chain's to %s", got, want)
		}
	})

	t.Run("resumed during the fold", func(t *testing.T) {
		s, want := pauseWithChain(t, m)
		reached, release := gatedFold(t)
		s.life.Lock()
		m.startFold(s)
		f := s.fold
		s.life.Unlock()
		<-reached
		resumed := make(chan error, 1)
		go func() { resumed <- m.Resume(ctx, s.id) }()
		select {
		case err := <-resumed:
			t.Fatalf("the resume did not wait for the fold to end: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
		release()
		if err := <-resumed; err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.done:
		default:
			t.Fatal("the resume went on while the fold ran")
		}
		if got := cellText(t, m, s.id, "memsum"); got != want {
			t.Errorf("the resumed guest's memory sums to %s, the chain's to %s", got, want)
		}
		if _, err := os.Stat(filepath.Join(s.dir, foldDir)); err == nil {
			t.Error("the cancelled fold left its directory")
		}
		if n := imageChain(filepath.Join(s.dir, backingDir)); n != 2 {
			t.Errorf("the resume restored a chain of %d files, want the unfolded 3", n+1)
		}
	})

	t.Run("deleted during the fold", func(t *testing.T) {
		s, _ := pauseWithChain(t, m)
		reached, release := gatedFold(t)
		s.life.Lock()
		m.startFold(s)
		f := s.fold
		s.life.Unlock()
		<-reached
		deleted := make(chan error, 1)
		go func() { deleted <- m.Delete(ctx, s.id) }()
		release()
		if err := <-deleted; err != nil {
			t.Fatal(err)
		}
		select {
		case <-f.done:
		default:
			t.Fatal("the delete returned while the fold ran")
		}
		if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the deleted sandbox's directory: %v", err)
		}
	})
}

// A pause of a sandbox whose image is whole starts no fold (the fake VMM
// writes whole images), and stopFold with none is a no-op.
func TestNoFoldForAWholeImage(t *testing.T) {
	m, _ := newPausableManager(t, nil)
	info, err := m.Create(context.Background(), sandbox.Config{MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(context.Background(), info.ID); err != nil {
		t.Fatal(err)
	}
	s := sandboxOf(t, m, info.ID)
	if s.fold != nil {
		t.Error("a fold started for a whole image")
	}
	s.stopFold()
	s.stopFold()
	if err := m.Resume(context.Background(), info.ID); err != nil {
		t.Fatal(err)
	}
}

// waitFold waits for the fold of sandbox id's pause chain, if one runs,
// to end by itself.
func waitFold(t *testing.T, m *VMManager, id string) {
	t.Helper()
	s := sandboxOf(t, m, id)
	s.netMu.Lock()
	f := s.fold
	s.netMu.Unlock()
	if f != nil {
		<-f.done
	}
}
