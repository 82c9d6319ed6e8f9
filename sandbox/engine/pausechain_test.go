package engine

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// chainState is a valid state of the smallest machine whose memory is a
// layer over layers (none: a whole image).
func chainState(layers []snapshot.Layer, ext []snapshot.Extent) *snapshot.State {
	st := &snapshot.State{
		Machine: snapshot.Machine{VCPUs: 1, MemoryMiB: snapshot.MinMemoryMiB, Memory: snapshot.MemoryLayout(snapshot.MinMemoryMiB),
			Layers: layers, Extents: ext},
		VCPUs: []snapshot.VCPU{{CPUID: []kvm.CPUIDEntry{{}}, XSAVE: make([]byte, kvm.XSAVESize), LAPIC: make([]byte, len(kvm.LAPICState{}.Regs))}},
	}
	for id := range 3 {
		st.VM.IRQChips = append(st.VM.IRQChips, snapshot.IRQChip{ChipID: uint32(id), Data: make([]byte, kvm.IRQChipSize)})
	}
	return st
}

// writeVMMImage writes into dir what a VMM's save would: mem as the memory
// file and st as the state file, with mem's sum; it returns the layer
// that names mem under a later one.
func writeVMMImage(t *testing.T, dir string, st *snapshot.State, mem []byte, size int64) snapshot.Layer {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, snapMemFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Write(mem)
	f.Truncate(size)
	sum, _, err := snapshot.SumFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := snapshot.EncodeWithMemory(&b, st, sum); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapStateFile), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return snapshot.Layer{Size: size, CRC32C: sum, Extents: st.Machine.Extents}
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// A sandbox resumed from its own image keeps that image's files under the
// layer its next pause writes, opens them in order at its resume and
// checks them; a pause that wrote a whole image keeps no chain; a damaged
// or missing chain file is refused; a sandbox with no image of its own
// links nothing, so its pause never layers over a file it shares.
func TestPauseChain(t *testing.T) {
	dir := t.TempDir()
	backing, tmp, paused := filepath.Join(dir, backingDir), filepath.Join(dir, pausedDir+partialSuffix), filepath.Join(dir, pausedDir)
	for _, d := range []string{backing, tmp} {
		os.Mkdir(d, 0o700)
	}
	if linked, err := linkChain(dir, tmp); linked || err != nil {
		t.Fatalf("a sandbox with no image of its own linked a chain (%v, %v)", linked, err)
	}
	whole := chainState(nil, nil)
	size := whole.Machine.ImageSize()
	base := writeVMMImage(t, backing, whole, []byte("the base"), size)

	// The first pause after a resume: a layer over the backing image.
	linked, err := linkChain(dir, tmp)
	if !linked || err != nil {
		t.Fatalf("linkChain = %v, %v", linked, err)
	}
	if !sameFile(t, filepath.Join(tmp, chainFile(0)), filepath.Join(backing, snapMemFile)) {
		t.Fatal("layer.0 is not the backing image's memory file")
	}
	ext := []snapshot.Extent{{Off: 0, Len: 4096}}
	writeVMMImage(t, tmp, chainState([]snapshot.Layer{base}, ext), bytes.Repeat([]byte{7}, 4096), 4096)
	if err := settleChain(tmp, true); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(backing)
	if err := os.Rename(tmp, paused); err != nil {
		t.Fatal(err)
	}
	st := vmStart{files: control.Files{}}
	defer st.files.Close()
	if err := openImage(paused, &st); err != nil {
		t.Fatalf("open a chain: %v", err)
	}
	if st.spec.Restore.Layers != 1 || st.files[control.LayerSlot(0)] == nil {
		t.Fatalf("a resume of a layer over one file passes %d layers", st.spec.Restore.Layers)
	}
	if err := st.spec.CheckFiles(st.files); err != nil {
		t.Fatalf("the files do not fill the spec's slots: %v", err)
	}

	// A layer's file gone, then damaged: refused.
	os.Rename(filepath.Join(paused, chainFile(0)), filepath.Join(dir, "aside"))
	st2 := vmStart{files: control.Files{}}
	defer st2.files.Close()
	if err := openImage(paused, &st2); err == nil || !strings.Contains(err.Error(), "chain of 2 files") {
		t.Errorf("a chain with its base missing: %v", err)
	}
	os.Rename(filepath.Join(dir, "aside"), filepath.Join(paused, chainFile(0)))
	f, _ := os.OpenFile(filepath.Join(paused, chainFile(0)), os.O_WRONLY, 0)
	f.WriteAt([]byte("rot"), 1<<20)
	f.Close()
	st3 := vmStart{files: control.Files{}}
	defer st3.files.Close()
	if err := openImage(paused, &st3); !errors.Is(err, errImageCorrupt) {
		t.Errorf("a chain with a damaged base: %v, want errImageCorrupt", err)
	}

	// The resume renames it backing; the next pause links both files,
	// and a VMM that wrote a whole image (a flattened chain) leaves none.
	os.Rename(paused, backing)
	os.Mkdir(tmp, 0o700)
	if linked, err := linkChain(dir, tmp); !linked || err != nil {
		t.Fatal(linked, err)
	}
	if !sameFile(t, filepath.Join(tmp, chainFile(1)), filepath.Join(backing, snapMemFile)) || !sameFile(t, filepath.Join(tmp, chainFile(0)), filepath.Join(backing, chainFile(0))) {
		t.Fatal("the second pause's chain is not the backing image's files in order")
	}
	writeVMMImage(t, tmp, whole, []byte("flat"), size)
	if err := settleChain(tmp, true); err != nil {
		t.Fatal(err)
	}
	if names, _ := filepath.Glob(filepath.Join(tmp, "layer.*")); len(names) != 0 {
		t.Errorf("a whole image keeps %q", names)
	}
	// A layer the daemon linked nothing for cannot be restored.
	writeVMMImage(t, tmp, chainState([]snapshot.Layer{base}, ext), bytes.Repeat([]byte{7}, 4096), 4096)
	if err := settleChain(tmp, false); err == nil {
		t.Error("a layer over files that were not kept was accepted")
	}
}
