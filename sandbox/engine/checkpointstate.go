package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A checkpoint's state file, as the VMM writes it, names its own layer's
// extents (Machine.Extents) and no chain under them (Machine.Layers nil):
// the chain is the daemon's (checkpoints.go). snapshot.Decode refuses
// extents with no layers under them, so the daemon reads it here: the
// header and body as Decode does, then the whole state checked by
// snapshot's own Validate over a stand-in base, which checks the extents
// (whole pages, in order, apart, each inside one memory region, at most
// snapshot.MaxLayerExtents) with the rest of the machine. When
// vmm/snapshot offers its own decode of a checkpoint's state, this goes.

// Header layout of a state file (vmm/snapshot's file.go).
const (
	ckHdrSize    = 32
	ckHdrVersion = 8
	ckHdrBodyLen = 16
	ckHdrBodySum = 24
)

var ckCastagnoli = crc32.MakeTable(crc32.Castagnoli)

// decodeCheckpointState reads a checkpoint's state file from r (at most
// snapshot.MaxBody of body) and checks it: a machine cellvm can build,
// with no chain of its own and valid extents (none: a whole image).
func decodeCheckpointState(r io.Reader) (*snapshot.State, error) {
	h := make([]byte, ckHdrSize)
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, fmt.Errorf("checkpoint state file: header: %w", err)
	}
	if string(h[:len(snapshot.Magic)]) != snapshot.Magic {
		return nil, fmt.Errorf("checkpoint state file: %w", snapshot.ErrNotStateFile)
	}
	if v := binary.LittleEndian.Uint32(h[ckHdrVersion:]); v != snapshot.FormatVersion && v != snapshot.LayeredFormatVersion {
		return nil, fmt.Errorf("checkpoint state file: %w: version %d", snapshot.ErrVersion, v)
	}
	n := binary.LittleEndian.Uint64(h[ckHdrBodyLen:])
	if n > snapshot.MaxBody {
		return nil, fmt.Errorf("checkpoint state file: %w: a %d-byte body", snapshot.ErrCorrupt, n)
	}
	body, err := io.ReadAll(io.LimitReader(r, int64(n)))
	if err != nil {
		return nil, fmt.Errorf("checkpoint state file: %w", err)
	}
	if uint64(len(body)) != n {
		return nil, fmt.Errorf("checkpoint state file: %w: truncated", snapshot.ErrCorrupt)
	}
	if crc32.Checksum(body, ckCastagnoli) != binary.LittleEndian.Uint32(h[ckHdrBodySum:]) {
		return nil, fmt.Errorf("checkpoint state file: %w: body checksum", snapshot.ErrCorrupt)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	st := new(snapshot.State)
	if err := dec.Decode(st); err != nil || dec.More() {
		return nil, fmt.Errorf("checkpoint state file: %w: %v", snapshot.ErrCorrupt, err)
	}
	if err := checkCheckpointState(st); err != nil {
		return nil, err
	}
	return st, nil
}

// checkCheckpointState checks a decoded checkpoint state: no chain, at
// most maxCheckpointExtents extents, and valid as the layer it says it is.
func checkCheckpointState(st *snapshot.State) error {
	if len(st.Machine.Layers) != 0 {
		return fmt.Errorf("checkpoint state file: names %d files under its memory file; the chain is the daemon's", len(st.Machine.Layers))
	}
	if len(st.Machine.Extents) > maxCheckpointExtents {
		return fmt.Errorf("checkpoint state file: %d extents, at most %d", len(st.Machine.Extents), maxCheckpointExtents)
	}
	probe := *st
	if len(st.Machine.Extents) > 0 {
		probe.Machine.Layers = []snapshot.Layer{{Size: st.Machine.ImageSize()}}
	}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("checkpoint state file: %w", err)
	}
	return nil
}

// readCheckpointState decodes the checkpoint state file at path.
func readCheckpointState(path string) (*snapshot.State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return decodeCheckpointState(f)
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
// the checkpoint's own memory file last) from the checkpoint state st:
// its Machine.Layers the files under the top one, as measured, and its
// memory sum the top one's.
func composeState(st *snapshot.State, chain []*ckFile) ([]byte, error) {
	if len(chain) == 0 || !chain[0].whole() {
		return nil, errors.New("compose a checkpoint: no whole image under its chain")
	}
	if len(chain) > maxCheckpointChain {
		return nil, fmt.Errorf("compose a checkpoint: %d memory files, at most %d", len(chain), maxCheckpointChain)
	}
	top := chain[len(chain)-1]
	out := *st
	out.Machine.Layers, out.Machine.Extents = nil, nil
	total := 0
	if len(chain) > 1 {
		for i, f := range chain[:len(chain)-1] {
			if i > 0 && f.whole() {
				return nil, fmt.Errorf("compose a checkpoint: memory file %d of its chain is a whole image", i)
			}
			out.Machine.Layers = append(out.Machine.Layers, f.layer())
			total += len(f.ext)
		}
		out.Machine.Extents = top.ext
		total += len(top.ext)
	} else if !top.whole() {
		return nil, errors.New("compose a checkpoint: a layer with nothing under it")
	}
	if total > maxChainExtents {
		return nil, fmt.Errorf("compose a checkpoint: %d extents in all, at most %d", total, maxChainExtents)
	}
	var b bytes.Buffer
	if err := snapshot.EncodeWithMemory(&b, &out, top.crc); err != nil {
		return nil, fmt.Errorf("compose a checkpoint: %w", err)
	}
	return b.Bytes(), nil
}
