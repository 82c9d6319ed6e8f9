package snapshot

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// checkpointLayer is a checkpoint layer's state: its own extents, no
// chain, and the vsock reset a restore owes the guest.
func checkpointLayer() *State {
	st := sample()
	st.Machine.Extents = []Extent{{Off: pageBytes, Len: 2 * pageBytes}, {Off: 40 * pageBytes, Len: pageBytes}}
	st.ResetVsock = true
	return st
}

func encodeCheckpoint(t testing.TB, st *State) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := EncodeCheckpoint(&b, st, 0xabcd); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A layer's own state file round-trips through DecodeCheckpoint, which
// checks the memory file's size against it, and Decode (a restore)
// refuses it: alone it would run on the wrong pages.
func TestCheckpointLayerRoundTrip(t *testing.T) {
	st := checkpointLayer()
	data := encodeCheckpoint(t, st)
	size := ExtentsSize(st.Machine.Extents)
	cp, err := DecodeCheckpoint(bytes.NewReader(data), size)
	if err != nil {
		t.Fatal(err)
	}
	if !cp.Layer || !reflect.DeepEqual(cp.State, st) {
		t.Fatalf("decoded layer=%v state %+v, want the encoded layer", cp.Layer, cp.State.Machine)
	}
	if sum, err := MemorySum(bytes.NewReader(data)); err != nil || sum != 0xabcd {
		t.Errorf("memory sum %#x, %v; want 0xabcd", sum, err)
	}
	for _, n := range []int64{0, size - pageBytes, size + 1, st.Machine.ImageSize()} {
		if _, err := DecodeCheckpoint(bytes.NewReader(data), n); !errors.Is(err, ErrInvalid) {
			t.Errorf("a layer of %d bytes with a memory file of %d: %v, want ErrInvalid", size, n, err)
		}
	}
	if _, err := Decode(bytes.NewReader(data)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "no layers under them") {
		t.Errorf("Decode of a checkpoint layer alone: %v, want ErrInvalid", err)
	}
}

// A whole-image checkpoint is an ordinary state file that keeps its
// ResetVsock; a layer in which nothing changed is told from it by its
// memory file's size.
func TestCheckpointWholeImage(t *testing.T) {
	st := sample()
	st.ResetVsock = true
	data := encodeCheckpoint(t, st)
	cp, err := DecodeCheckpoint(bytes.NewReader(data), st.Machine.ImageSize())
	if err != nil || cp.Layer {
		t.Fatalf("DecodeCheckpoint: layer=%v, %v", cp != nil && cp.Layer, err)
	}
	got, err := Decode(bytes.NewReader(data))
	if err != nil || !got.ResetVsock {
		t.Fatalf("Decode of a whole-image checkpoint: reset_vsock=%v, %v", got != nil && got.ResetVsock, err)
	}
	if cp, err := DecodeCheckpoint(bytes.NewReader(data), 0); err != nil || !cp.Layer {
		t.Errorf("a checkpoint with no extents and an empty memory file: %v, want an empty layer", err)
	}
	if _, err := DecodeCheckpoint(bytes.NewReader(data), 4096); !errors.Is(err, ErrInvalid) {
		t.Errorf("a whole image's memory file of 4096 bytes: %v, want ErrInvalid", err)
	}
	if err := EncodeCheckpoint(&bytes.Buffer{}, layeredSample(), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("a checkpoint with a chain: %v, want ErrInvalid", err)
	}
	if _, err := DecodeCheckpoint(bytes.NewReader(encode(t, layeredSample())), 3*pageBytes); !errors.Is(err, ErrInvalid) {
		t.Errorf("DecodeCheckpoint of a chain: %v, want ErrInvalid", err)
	}
}

// ComposeCheckpoint puts the daemon's chain under the checkpoint's own
// extents, and the composed file restores (Decode) with the top file's
// sum the daemon gave.
func TestComposeCheckpoint(t *testing.T) {
	cp := &Checkpoint{State: checkpointLayer(), Layer: true}
	before := *cp.State
	under := layeredSample().Machine.Layers
	var b bytes.Buffer
	if err := EncodeComposed(&b, cp, under, 0x1111); err != nil {
		t.Fatal(err)
	}
	data := b.Bytes()
	st, err := Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(st.Machine.Layers, under) || !reflect.DeepEqual(st.Machine.Extents, cp.State.Machine.Extents) || !st.ResetVsock {
		t.Errorf("composed layers %+v extents %+v reset %v", st.Machine.Layers, st.Machine.Extents, st.ResetVsock)
	}
	if sum, _ := MemorySum(bytes.NewReader(data)); sum != 0x1111 {
		t.Errorf("composed memory sum %#x, want the daemon's 0x1111", sum)
	}
	if !reflect.DeepEqual(*cp.State, before) {
		t.Error("ComposeCheckpoint changed the checkpoint")
	}
	// A layer in which nothing changed composes: its memory file is empty.
	empty := &Checkpoint{State: sample(), Layer: true}
	if st, err := ComposeCheckpoint(empty, under); err != nil || st.Machine.MemoryFileSize() != 0 {
		t.Errorf("an empty layer: %v", err)
	}
	whole := &Checkpoint{State: sample()}
	if st, err := ComposeCheckpoint(whole, nil); err != nil || st.Machine.Layered() {
		t.Errorf("a whole image alone: %v", err)
	}
}

func TestComposeCheckpointRefuses(t *testing.T) {
	layer := &Checkpoint{State: checkpointLayer(), Layer: true}
	base := layeredSample().Machine.Layers[:1]
	long := append([]Layer(nil), base...)
	for len(long) < MaxCheckpointChain {
		long = append(long, Layer{Size: pageBytes, Extents: []Extent{{Off: 0, Len: pageBytes}}})
	}
	var many []Extent
	for i := range MaxLayerExtents {
		many = append(many, Extent{Off: uint64(2*i) * pageBytes, Len: pageBytes})
	}
	wide := append([]Layer(nil), base...)
	for len(wide) < 1+MaxChainExtents/MaxLayerExtents {
		wide = append(wide, Layer{Size: ExtentsSize(many), Extents: many})
	}
	for _, c := range []struct {
		name  string
		cp    *Checkpoint
		under []Layer
		want  string
	}{
		{"no checkpoint", nil, base, "no checkpoint"},
		{"a layer alone", layer, nil, "needs the files under it"},
		{"a whole image over files", &Checkpoint{State: sample()}, base, "has no files under it"},
		{"too long", layer, long, "at most"},
		{"too many extents", layer, wide, "extents across its files"},
		{"a base with extents", layer, layeredSample().Machine.Layers[1:], "base memory file"},
	} {
		var b bytes.Buffer
		err := EncodeComposed(&b, c.cp, c.under, 0)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) || b.Len() != 0 {
			t.Errorf("%s: %v (%d bytes written), want ErrInvalid saying %q and nothing written", c.name, err, b.Len(), c.want)
		}
	}
	if n := ChainExtents(wide, layer.State.Machine.Extents); n != (len(wide)-1)*MaxLayerExtents+2 {
		t.Errorf("ChainExtents = %d", n)
	}
}
