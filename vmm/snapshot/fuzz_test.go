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
