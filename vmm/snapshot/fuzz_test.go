package snapshot

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzDecode: whatever a state file holds, Decode returns a state or an
// error and never panics; a state it accepts encodes and decodes again to
// itself. The seed corpus (testdata/fuzz/FuzzDecode) has a valid file, a
// truncated one, one of another version and garbage.
func FuzzDecode(f *testing.F) {
	f.Add(encode(f, sample()))
	f.Add(encode(f, layeredSample()))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Decode(bytes.NewReader(data))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := Encode(&b, st); err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
		again, err := Decode(&b)
		if err != nil {
			t.Fatalf("a re-encoded state does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, st) {
			t.Fatalf("state changed in a round trip")
		}
	})
}

// FuzzDecodeBody is FuzzDecode past the checksum: data is the body of a
// file with a correct header, so the fuzzer works on the JSON decoding and
// Validate rather than on the CRC.
func FuzzDecodeBody(f *testing.F) {
	f.Add(encode(f, sample())[headerSize:])
	f.Fuzz(func(t *testing.T, body []byte) {
		st, err := Decode(bytes.NewReader(withBody(FormatVersion, body)))
		if err != nil {
			return
		}
		var b bytes.Buffer
		if err := Encode(&b, st); err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
		if _, err := Decode(&b); err != nil {
			t.Fatalf("a re-encoded state does not decode: %v", err)
		}
	})
}

// FuzzDecodeLayeredBody is FuzzDecodeBody for a layered state file
// (version 2): the fuzzer works on the chain's fields and their checks.
func FuzzDecodeLayeredBody(f *testing.F) {
	f.Add(encode(f, layeredSample())[headerSize:])
	f.Fuzz(func(t *testing.T, body []byte) {
		st, err := Decode(bytes.NewReader(withBody(LayeredFormatVersion, body)))
		if err != nil {
			return
		}
		if !st.Machine.Layered() {
			t.Fatal("a version 2 file with no layers was accepted")
		}
		if st.Machine.MemoryFileSize() < 0 {
			t.Fatal("a layer of negative size was accepted")
		}
		var b bytes.Buffer
		if err := Encode(&b, st); err != nil {
			t.Fatalf("a decoded state does not encode: %v", err)
		}
		if _, err := Decode(&b); err != nil {
			t.Fatalf("a re-encoded state does not decode: %v", err)
		}
	})
}

// FuzzDecodeCheckpoint: whatever a VMM (which may be compromised) writes
// as a checkpoint's state file, and whatever size its memory file has,
// DecodeCheckpoint returns a checkpoint or an error and never panics;
// one it accepts encodes again to itself, and composes over a base (a
// layer) or alone (a whole image) into a state a restore accepts, or an
// error.
func FuzzDecodeCheckpoint(f *testing.F) {
	layer := checkpointLayer()
	f.Add(encodeCheckpoint(f, layer), ExtentsSize(layer.Machine.Extents))
	f.Add(encodeCheckpoint(f, sample()), sample().Machine.ImageSize())
	f.Add(encodeCheckpoint(f, sample()), int64(0))
	f.Fuzz(func(t *testing.T, data []byte, memSize int64) {
		cp, err := DecodeCheckpoint(bytes.NewReader(data), memSize)
		if err != nil {
			return
		}
		if cp.State.Machine.Layered() {
			t.Fatal("a checkpoint with a chain under it was accepted")
		}
		if want := cp.State.Machine.ImageSize(); cp.Layer {
			want = ExtentsSize(cp.State.Machine.Extents)
			if want != memSize {
				t.Fatalf("a layer of %d bytes accepted with a memory file of %d", want, memSize)
			}
		} else if want != memSize {
			t.Fatalf("a whole image of %d bytes accepted with a memory file of %d", want, memSize)
		}
		var b bytes.Buffer
		if err := EncodeCheckpoint(&b, cp.State, 0); err != nil {
			t.Fatalf("a decoded checkpoint does not encode: %v", err)
		}
		again, err := DecodeCheckpoint(&b, memSize)
		if err != nil || again.Layer != cp.Layer || !reflect.DeepEqual(again.State, cp.State) {
			t.Fatalf("checkpoint changed in a round trip: %v", err)
		}
		var under []Layer
		if cp.Layer {
			under = []Layer{{Size: cp.State.Machine.ImageSize(), CRC32C: 1}}
		}
		b.Reset()
		if err := EncodeComposed(&b, cp, under, 2); err != nil {
			t.Fatalf("a valid checkpoint does not compose over a valid base: %v", err)
		}
		st, err := Decode(&b)
		if err != nil {
			t.Fatalf("a composed checkpoint does not decode: %v", err)
		}
		if len(st.Machine.Extents) != len(cp.State.Machine.Extents) {
			t.Fatal("composing changed the checkpoint's extents")
		}
	})
}

// FuzzDecodeCheckpointBody is FuzzDecodeCheckpoint past the checksum, on
// a version 1 body decoded as a layer's: the fuzzer works on the JSON and
// the extents' checks.
func FuzzDecodeCheckpointBody(f *testing.F) {
	f.Add(encodeCheckpoint(f, checkpointLayer())[headerSize:])
	f.Fuzz(func(t *testing.T, body []byte) {
		data := withBody(FormatVersion, body)
		st, _, err := decodeUnchecked(bytes.NewReader(data))
		if err != nil {
			return
		}
		cp, err := DecodeCheckpoint(bytes.NewReader(data), ExtentsSize(st.Machine.Extents))
		if err != nil {
			return
		}
		if !cp.Layer && len(cp.State.Machine.Extents) > 0 {
			t.Fatal("a checkpoint with extents decoded as a whole image")
		}
		if _, err := ComposeCheckpoint(cp, []Layer{{Size: cp.State.Machine.ImageSize()}}); cp.Layer && err != nil {
			t.Fatalf("a valid layer does not compose over a valid base: %v", err)
		}
	})
}
