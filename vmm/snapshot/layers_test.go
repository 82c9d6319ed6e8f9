package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// layeredSample is sample() whose memory is a base, one layer and its own
// memory file over them.
func layeredSample() *State {
	st := sample()
	size := st.Machine.ImageSize()
	st.Machine.Layers = []Layer{
		{Size: size, CRC32C: 0x1234},
		{Size: 3 * pageBytes, CRC32C: 0x5678, Extents: []Extent{{Off: 0, Len: pageBytes}, {Off: 16 * pageBytes, Len: 2 * pageBytes}}},
	}
	st.Machine.Extents = []Extent{{Off: 2 * pageBytes, Len: pageBytes}}
	return st
}

// A layered state round-trips, as version 2, and a whole one stays
// version 1 (an older cellvm reads it).
func TestLayeredStateRoundTrip(t *testing.T) {
	st := layeredSample()
	b := encode(t, st)
	if v := binary.LittleEndian.Uint32(b[8:]); v != LayeredFormatVersion {
		t.Fatalf("a layered state file is version %d, want %d", v, LayeredFormatVersion)
	}
	got, err := Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Fatalf("decoded %+v, want %+v", got.Machine, st.Machine)
	}
	if got.Machine.MemoryFileSize() != pageBytes {
		t.Errorf("the layer's own file is %d bytes, want one page", got.Machine.MemoryFileSize())
	}
	if v := binary.LittleEndian.Uint32(encode(t, sample())[8:]); v != FormatVersion {
		t.Errorf("a whole image's state file is version %d, want %d", v, FormatVersion)
	}
}

// A version that does not say what the body is, is refused.
func TestLayeredVersionMustMatch(t *testing.T) {
	b := encode(t, layeredSample())
	binary.LittleEndian.PutUint32(b[8:], FormatVersion)
	if _, err := Decode(bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("layers in a version 1 file: %v, want ErrCorrupt", err)
	}
	b = encode(t, sample())
	binary.LittleEndian.PutUint32(b[8:], LayeredFormatVersion)
	if _, err := Decode(bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a version 2 file with no layers: %v, want ErrCorrupt", err)
	}
}

func TestValidateRefusesImpossibleChains(t *testing.T) {
	size := sample().Machine.ImageSize()
	for _, c := range []struct {
		name string
		edit func(m *Machine)
		want string
	}{
		{"too deep", func(m *Machine) {
			for len(m.Layers) < MaxCheckpointChain {
				m.Layers = append(m.Layers, Layer{Size: pageBytes, Extents: []Extent{{Off: 0, Len: pageBytes}}})
			}
		}, "at most"},
		{"a base of another size", func(m *Machine) { m.Layers[0].Size = size - pageBytes }, "base memory file"},
		{"a base with extents", func(m *Machine) { m.Layers[0].Extents = []Extent{{Off: 0, Len: pageBytes}} }, "base memory file"},
		{"a layer's size", func(m *Machine) { m.Layers[1].Size++ }, "its extents hold"},
		{"extents out of order", func(m *Machine) { m.Layers[1].Extents[0].Off = 32 * pageBytes; m.Layers[1].Size = 3 * pageBytes }, "after the one before"},
		{"overlapping extents", func(m *Machine) { m.Layers[1].Extents[1].Off = 0 }, "after the one before"},
		{"part of a page", func(m *Machine) { m.Extents[0].Len = 100 }, "whole pages"},
		{"an empty extent", func(m *Machine) { m.Extents[0].Len = 0 }, "whole pages"},
		{"past the image", func(m *Machine) { m.Extents[0].Off = uint64(size) }, "inside one memory region"},
		{"wrapping around", func(m *Machine) { m.Extents[0] = Extent{Off: pageBytes, Len: ^uint64(0) &^ (pageBytes - 1)} }, "inside one memory region"},
		{"too many extents", func(m *Machine) {
			m.Extents = nil
			for i := range MaxLayerExtents + 1 {
				m.Extents = append(m.Extents, Extent{Off: uint64(2*i) * pageBytes, Len: pageBytes})
			}
		}, "at most"},
		{"extents with no layers", func(m *Machine) { m.Layers = nil }, "no layers under them"},
		{"too many extents in all", func(m *Machine) {
			var ext []Extent
			for i := range MaxLayerExtents {
				ext = append(ext, Extent{Off: uint64(2*i) * pageBytes, Len: pageBytes})
			}
			for len(m.Layers) < 2+MaxChainExtents/MaxLayerExtents {
				m.Layers = append(m.Layers, Layer{Size: ExtentsSize(ext), Extents: ext})
			}
		}, "extents across its files"},
	} {
		st := layeredSample()
		c.edit(&st.Machine)
		err := st.Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
}

// VerifyChain refuses a chain with a file missing, changed, or two files
// swapped, and names which.
func TestVerifyChain(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, data []byte) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		f.Write(data)
		return f
	}
	base := mk("base", bytes.Repeat([]byte{1}, 2*pageBytes))
	l1 := mk("l1", bytes.Repeat([]byte{2}, pageBytes))
	l2 := mk("l2", bytes.Repeat([]byte{3}, pageBytes))
	sumOf := func(f *os.File) Layer {
		s, n, err := SumFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return Layer{Size: n, CRC32C: s}
	}
	st := &State{Machine: Machine{Layers: []Layer{sumOf(base), sumOf(l1), sumOf(l2)}}}
	if err := VerifyChain(st, []*os.File{base, l1, l2}); err != nil {
		t.Fatalf("a good chain: %v", err)
	}
	for name, files := range map[string][]*os.File{
		"missing a layer": {base, l1},
		"reordered":       {base, l2, l1},
	} {
		if err := VerifyChain(st, files); !errors.Is(err, ErrMemoryCorrupt) {
			t.Errorf("%s: %v, want ErrMemoryCorrupt", name, err)
		}
	}
	l1.WriteAt([]byte{9}, 7)
	err := VerifyChain(st, []*os.File{base, l1, l2})
	if !errors.Is(err, ErrMemoryCorrupt) || !strings.Contains(err.Error(), "layer 1") {
		t.Errorf("a changed layer: %v, want ErrMemoryCorrupt naming layer 1", err)
	}
}
