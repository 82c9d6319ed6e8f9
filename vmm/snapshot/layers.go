package snapshot

import (
	"fmt"
	"os"
)

// Layered memory. A machine restored from a memory file maps it private
// and copy-on-write, so after a while most of its pages are still the
// file's. Writing a whole new memory file at its next save copies those
// pages file to file: the second pause of a large image cost five times
// the first. When the memory a machine was restored from belongs to it
// alone (its own pause image, never a snapshot's or a template's, which
// forks share and which may go away), a save may instead write only the
// pages the guest changed, into a layer over those files.
//
// A snapshot's memory is then a chain of files: a base, a whole image as
// a save writes one, and up to MaxLayers-1 layers over it, the snapshot's
// own memory file last. A layer holds whole pages packed one after the
// other, and its extents say where they go in the image: the first
// extent's pages first, and so on. Packed, not sparse at the image's
// offsets: a file system that cannot report holes (no SEEK_DATA) would
// otherwise make a layer's holes read as zeros over the pages below.
//
// The state file names the files under its own memory file, base first,
// each with its size, its CRC-32C and (a layer's) extents: a restore needs
// nothing else, and a chain with a file missing, damaged, replaced or out
// of order is refused (VerifyChain) rather than composed into a guest
// that runs on the wrong pages. Its own memory file's sum is the header's
// (memdigest.go), as for a whole image.
//
// A state file with layers is format version LayeredFormatVersion: a
// cellvm that cannot compose them refuses it by its version, with an
// error that says so, not halfway.

// Bounds of a chain.
const (
	// MaxLayers is the most files a snapshot's memory may be: the base
	// and the layers over it, its own memory file included. A save at the
	// bound writes a whole image instead (it flattens the chain), so the
	// page lookups of the save after it stay short. (A restore composes
	// up to MaxCheckpointChain: a checkpoint chain is longer.)
	MaxLayers = 4
	// MaxLayerExtents bounds one layer's extents. Each is a mapping of
	// its own in the restored process (two more where it splits the one
	// under it), and the host caps a process's mappings
	// (vm.max_map_count, 65530 by default); a save whose changes are more
	// scattered than this writes a whole image instead.
	MaxLayerExtents = 2048
	// MaxCheckpointChain is the most files a restore composes: a
	// checkpoint chain (checkpoint.go), a base and up to 32 layers. A
	// pause still flattens at MaxLayers.
	MaxCheckpointChain = 33
	// MaxChainExtents bounds the extents of a whole chain, every file's
	// together: each is a mapping or three (vm.max_map_count).
	MaxChainExtents = 16384
)

// chainExtents counts the extents of every file of the chain.
func (m *Machine) chainExtents() int {
	n := len(m.Extents)
	for _, l := range m.Layers {
		n += len(l.Extents)
	}
	return n
}

// LayeredFormatVersion is the format version of a state file whose memory
// is a chain (Machine.Layers).
const LayeredFormatVersion = 2

// Layer is one file under a snapshot's memory file.
type Layer struct {
	// Size is the file's size in bytes.
	Size int64
	// CRC32C is the file's sum (MemoryHash: holes as zeros).
	CRC32C uint32
	// Extents say where the file's pages go, for a layer; the base has
	// none (it is a whole image).
	Extents []Extent `json:",omitempty"`
}

// Extent is a run of whole pages of a layer: Len bytes that go at Off in
// the memory image (the file offsets of Machine.Memory). In the layer file
// they follow the extents before them.
type Extent struct {
	Off uint64
	Len uint64
}

// Layered reports whether the snapshot's memory is a chain: its memory
// file a layer over Machine.Layers.
func (m *Machine) Layered() bool { return len(m.Layers) > 0 }

// ImageSize is the size of the memory image: the regions end to end.
func (m *Machine) ImageSize() int64 {
	var n uint64
	for _, r := range m.Memory {
		n += r.Size
	}
	return int64(n)
}

// MemoryFileSize is the size the snapshot's own memory file must have: the
// image's for a whole image, its extents' for a layer.
func (m *Machine) MemoryFileSize() int64 {
	if !m.Layered() {
		return m.ImageSize()
	}
	return ExtentsSize(m.Extents)
}

// ExtentsSize is how many bytes a layer with extents ext holds.
func ExtentsSize(ext []Extent) int64 {
	var n uint64
	for _, e := range ext {
		n += e.Len
	}
	return int64(n)
}

// validateChain checks the chain's shape: its depth, a base the image's
// size with no extents, and every layer's extents whole pages, in order,
// apart, each inside one memory region, and as many bytes as the file.
// alone allows extents with no layers under them: a checkpoint layer's
// own state file, which the daemon composes with its chain.
func (m *Machine) validateChain(alone bool) error {
	if !m.Layered() {
		if alone {
			if err := m.validateExtents(m.Extents); err != nil {
				return fmt.Errorf("memory file's extents: %v", err)
			}
			return nil
		}
		if len(m.Extents) != 0 {
			return fmt.Errorf("%d memory extents with no layers under them", len(m.Extents))
		}
		return nil
	}
	if len(m.Layers)+1 > MaxCheckpointChain {
		return fmt.Errorf("memory in %d files, at most %d", len(m.Layers)+1, MaxCheckpointChain)
	}
	if n := m.chainExtents(); n > MaxChainExtents {
		return fmt.Errorf("memory in %d extents across its files, at most %d", n, MaxChainExtents)
	}
	base := m.Layers[0]
	if base.Size != m.ImageSize() || len(base.Extents) != 0 {
		return fmt.Errorf("base memory file of %d bytes with %d extents, want %d bytes and none", base.Size, len(base.Extents), m.ImageSize())
	}
	for i, l := range m.Layers[1:] {
		if err := m.validateExtents(l.Extents); err != nil {
			return fmt.Errorf("memory layer %d: %v", i+1, err)
		}
		if got := ExtentsSize(l.Extents); got != l.Size {
			return fmt.Errorf("memory layer %d of %d bytes, its extents hold %d", i+1, l.Size, got)
		}
	}
	if err := m.validateExtents(m.Extents); err != nil {
		return fmt.Errorf("memory file's extents: %v", err)
	}
	return nil
}

func (m *Machine) validateExtents(ext []Extent) error {
	if len(ext) > MaxLayerExtents {
		return fmt.Errorf("%d extents, at most %d", len(ext), MaxLayerExtents)
	}
	var next uint64
	for i, e := range ext {
		if e.Len == 0 || e.Off%pageBytes != 0 || e.Len%pageBytes != 0 || e.Off < next {
			return fmt.Errorf("extent %d (%#x+%#x) is not whole pages after the one before it", i, e.Off, e.Len)
		}
		if !m.inOneRegion(e) {
			return fmt.Errorf("extent %d (%#x+%#x) is not inside one memory region", i, e.Off, e.Len)
		}
		next = e.Off + e.Len
	}
	return nil
}

// inOneRegion reports whether e lies inside one region of the image.
func (m *Machine) inOneRegion(e Extent) bool {
	for _, r := range m.Memory {
		if e.Off >= r.FileOffset && e.Off-r.FileOffset < r.Size && e.Len <= r.Size-(e.Off-r.FileOffset) {
			return true
		}
	}
	return false
}

const pageBytes = 4096

// VerifyChain checks the files under a snapshot's memory file (layers,
// base first, in the order st names them) against what its state file
// says of them: as many, each of its size and sum. It reads all of their
// data. A file missing, cut, damaged or in another place is an error that
// names it, wrapping ErrMemoryCorrupt.
func VerifyChain(st *State, layers []*os.File) error {
	want := st.Machine.Layers
	if len(layers) != len(want) {
		return fmt.Errorf("%w: the state file names %d memory files under its own, %d were given", ErrMemoryCorrupt, len(want), len(layers))
	}
	for i, f := range layers {
		sum, size, err := SumFile(f)
		if err != nil {
			return fmt.Errorf("memory layer %d (%s): %w", i, f.Name(), err)
		}
		if size != want[i].Size || sum != want[i].CRC32C {
			return fmt.Errorf("%w: memory layer %d (%s) is %d bytes summing to crc32c %08x, the state file says %d bytes and %08x: the chain is broken or out of order",
				ErrMemoryCorrupt, i, f.Name(), size, sum, want[i].Size, want[i].CRC32C)
		}
	}
	return nil
}
