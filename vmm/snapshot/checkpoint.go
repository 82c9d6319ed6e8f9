package snapshot

import (
	"bytes"
	"fmt"
	"io"
)

// Checkpoints (issue 29). A VMM with checkpoints on writes, at each
// checkpoint, a whole image (the first of a booted machine) or a layer of
// the pages written since the checkpoint before, and a state file that
// names only its own memory file: its extents (a layer's), and no chain
// under it. The daemon owns the chain: it keeps each checkpoint's files,
// sums them itself (never trusting the VMM's sum), and to restore
// checkpoint k it composes k's state with the files under it
// (ComposeCheckpoint), which is then an ordinary layered state file.
//
// A checkpoint's own state file is a version 1 file. A layer's has
// extents and no layers, which Validate (and so Decode, a restore)
// refuses: alone it would run on the wrong pages. Only DecodeCheckpoint
// reads it. Whether a checkpoint is a layer or a whole image its memory
// file's size says: a whole image is the image's size (at least
// MinMemoryMiB), a layer its extents' bytes (0 for a layer in which
// nothing changed). Either carries ResetVsock: the live guest's
// connections were left alone, and a restore resets them.

// MaxCheckpointExtents bounds one checkpoint layer's extents: the VMM
// coalesces its dirty pages to at most this many (merging the smallest
// gaps), so that most chains of MaxCheckpointChain files stay under
// MaxChainExtents.
const MaxCheckpointExtents = 1024

// Checkpoint is a checkpoint's state file, decoded.
type Checkpoint struct {
	State *State
	// Layer says its memory file is a layer (State.Machine.Extents, maybe
	// none) over the files of the checkpoint before; false: a whole
	// image.
	Layer bool
}

// EncodeCheckpoint writes st, a checkpoint's state, to w with memSum, its
// memory file's CRC-32C: a layer's own extents (Machine.Extents) and no
// layers, or neither for a whole image.
func EncodeCheckpoint(w io.Writer, st *State, memSum uint32) error {
	if st.Machine.Layered() {
		return fmt.Errorf("%w: a checkpoint's state names no files under its own (%d here)", ErrInvalid, len(st.Machine.Layers))
	}
	if err := st.validateAs(FormatVersion, true); err != nil {
		return err
	}
	return encodeValid(w, st, FormatVersion, flagMemSum, memSum)
}

// DecodeCheckpoint reads a checkpoint's state file as the VMM wrote it,
// whose memory file holds memSize bytes (as the daemon measured it), and
// checks both: a machine cellvm can build, extents inside the memory, in
// order, at most MaxLayerExtents, and a memory file of the size they say
// (a whole image: the image's). A chain is refused: a VMM names no files
// under a checkpoint. Whatever r holds, it returns an error rather than
// panic.
func DecodeCheckpoint(r io.Reader, memSize int64) (*Checkpoint, error) {
	st, v, err := decodeUnchecked(r)
	if err != nil {
		return nil, err
	}
	if v != FormatVersion || st.Machine.Layered() {
		return nil, fmt.Errorf("%w: a checkpoint's state file names %d files under its own; the daemon keeps the chain", ErrInvalid, len(st.Machine.Layers))
	}
	if err := st.validateAs(v, true); err != nil {
		return nil, err
	}
	cp := &Checkpoint{State: st, Layer: len(st.Machine.Extents) > 0 || memSize != st.Machine.ImageSize()}
	want := st.Machine.ImageSize()
	if cp.Layer {
		want = ExtentsSize(st.Machine.Extents)
	}
	if memSize != want {
		return nil, fmt.Errorf("%w: a checkpoint memory file of %d bytes, its state says %d", ErrInvalid, memSize, want)
	}
	return cp, nil
}

// ComposeCheckpoint is the state a restore of checkpoint cp takes: cp's
// state with under, the files below its memory file (base first: a whole
// image, then each layer with its extents, sizes and sums as the daemon
// knows them), as Machine.Layers, and cp's own extents for its memory
// file. A whole image has nothing under it. The result is checked: a
// chain over MaxCheckpointChain files or MaxChainExtents extents is an
// error. cp is not changed.
func ComposeCheckpoint(cp *Checkpoint, under []Layer) (*State, error) {
	if cp == nil || cp.State == nil {
		return nil, fmt.Errorf("%w: no checkpoint state", ErrInvalid)
	}
	if !cp.Layer && len(under) > 0 {
		return nil, fmt.Errorf("%w: a whole-image checkpoint has no files under it, %d given", ErrInvalid, len(under))
	}
	if cp.Layer && len(under) == 0 {
		return nil, fmt.Errorf("%w: a checkpoint layer needs the files under it", ErrInvalid)
	}
	st := *cp.State
	st.Machine.Layers, st.Machine.Extents = nil, nil
	if len(under) > 0 {
		st.Machine.Layers = append([]Layer(nil), under...)
		st.Machine.Extents = append([]Extent{}, cp.State.Machine.Extents...)
	}
	if err := st.Validate(); err != nil {
		return nil, err
	}
	return &st, nil
}

// EncodeComposed writes ComposeCheckpoint(cp, under) to w as a state file
// whose header carries memSum, the CRC-32C of cp's memory file (the top
// of the chain) as the daemon summed it. Nothing is written on an error.
func EncodeComposed(w io.Writer, cp *Checkpoint, under []Layer, memSum uint32) error {
	st, err := ComposeCheckpoint(cp, under)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := EncodeWithMemory(&b, st, memSum); err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}

// ChainExtents counts the extents a restore of a chain maps: every
// layer's and the top file's.
func ChainExtents(under []Layer, top []Extent) int {
	n := len(top)
	for _, l := range under {
		n += len(l.Extents)
	}
	return n
}
