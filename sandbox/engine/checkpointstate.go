package engine

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A checkpoint's state file, as the VMM writes it, names its own layer's
// extents and no chain under them: the chain is the daemon's
// (checkpoints.go). vmm/snapshot reads it (DecodeCheckpoint, which tells
// a layer from a whole image by the memory file's size as the daemon
// measured it) and composes a restore's state (EncodeComposed).

// readCheckpointState decodes the checkpoint state file at path, whose
// memory file the daemon measured at memSize bytes, and checks it: a
// machine cellvm can build, no chain of its own, its extents valid and at
// most snapshot.MaxCheckpointExtents, the memory file their size.
func readCheckpointState(path string, memSize int64) (*snapshot.Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cp, err := snapshot.DecodeCheckpoint(f, memSize)
	if err != nil {
		return nil, fmt.Errorf("checkpoint state file: %w", err)
	}
	if n := len(cp.State.Machine.Extents); n > maxCheckpointExtents {
		return nil, fmt.Errorf("checkpoint state file: %d extents, at most %d", n, maxCheckpointExtents)
	}
	return cp, nil
}

// measureCheckpoint checks the memory file at memPath against what st
// says it is (a whole image of the machine's size, or a layer of its
// extents' bytes) and returns it measured: its size and CRC-32C computed
// here, never taken from the VMM.
func measureCheckpoint(st *snapshot.State, memPath string, layer bool) (ckFile, error) {
	f, err := os.Open(memPath)
	if err != nil {
		return ckFile{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ckFile{}, err
	}
	want := st.Machine.ImageSize()
	if layer {
		want = snapshot.ExtentsSize(st.Machine.Extents)
	}
	if fi.Size() != want {
		return ckFile{}, fmt.Errorf("checkpoint memory file of %d bytes, its state says %d", fi.Size(), want)
	}
	sum, size, err := snapshot.SumFile(f)
	if err != nil {
		return ckFile{}, fmt.Errorf("checkpoint memory file: %w", err)
	}
	if size != want {
		return ckFile{}, fmt.Errorf("checkpoint memory file changed while it was summed")
	}
	out := ckFile{path: memPath, size: size, crc: sum}
	if layer { // non-nil, empty for an empty layer
		out.ext = append([]snapshot.Extent{}, st.Machine.Extents...)
	}
	return out, nil
}

// composeState returns the state file that restores chain (base first,
// the checkpoint's own memory file last) from the checkpoint cp: its
// Machine.Layers the files under the top one, as the daemon measured
// them, and its memory sum the top one's.
func composeState(cp *snapshot.Checkpoint, chain []*ckFile) ([]byte, error) {
	if len(chain) == 0 || !chain[0].whole() {
		return nil, errors.New("compose a checkpoint: no whole image under its chain")
	}
	if len(chain) > maxCheckpointChain {
		return nil, fmt.Errorf("compose a checkpoint: %d memory files, at most %d", len(chain), maxCheckpointChain)
	}
	top := chain[len(chain)-1]
	if top.whole() == cp.Layer {
		return nil, errors.New("compose a checkpoint: its state and its memory file disagree on whether it is a layer")
	}
	var under []snapshot.Layer
	for i, f := range chain[:len(chain)-1] {
		if i > 0 && f.whole() {
			return nil, fmt.Errorf("compose a checkpoint: memory file %d of its chain is a whole image", i)
		}
		under = append(under, f.layer())
	}
	var b bytes.Buffer
	if err := snapshot.EncodeComposed(&b, cp, under, top.crc); err != nil {
		return nil, fmt.Errorf("compose a checkpoint: %w", err)
	}
	return b.Bytes(), nil
}
