package snapshot

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func sampleWorkingSet() *WorkingSet {
	return &WorkingSet{MemorySum: 0xdeadbeef, MemoryBytes: 1 << 20,
		Extents: []Extent{{Off: 0, Len: 4096}, {Off: 3 * 4096, Len: 8192}, {Off: 1<<20 - 4096, Len: 4096}}}
}

func TestWorkingSetRoundTrip(t *testing.T) {
	w := sampleWorkingSet()
	var b bytes.Buffer
	if err := EncodeWorkingSet(&b, w); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeWorkingSet(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("got %+v, want %+v", got, w)
	}
	if got.Bytes() != 4*4096 {
		t.Fatalf("Bytes = %d", got.Bytes())
	}
	if err := got.For(0xdeadbeef, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := got.For(0xdeadbeee, 1<<20); err == nil {
		t.Fatal("a record for another memory file's sum was taken")
	}
	if err := got.For(0xdeadbeef, 2<<20); err == nil {
		t.Fatal("a record for another memory file's size was taken")
	}
}

func TestWorkingSetRefusesBadExtents(t *testing.T) {
	many := make([]Extent, MaxWorkingSetExtents+1)
	for i := range many {
		many[i] = Extent{Off: uint64(i) * 2 * 4096, Len: 4096}
	}
	for name, ext := range map[string][]Extent{
		"empty extent":  {{Off: 0, Len: 0}},
		"unaligned off": {{Off: 100, Len: 4096}},
		"unaligned len": {{Off: 0, Len: 100}},
		"overlap":       {{Off: 0, Len: 8192}, {Off: 4096, Len: 4096}},
		"touching":      {{Off: 0, Len: 4096}, {Off: 4096, Len: 4096}},
		"out of order":  {{Off: 8192, Len: 4096}, {Off: 0, Len: 4096}},
		"past the end":  {{Off: 1 << 20, Len: 4096}},
		"runs off":      {{Off: 1<<20 - 4096, Len: 8192}},
		"wraps":         {{Off: 4096, Len: ^uint64(0) - 4095}},
		"too many":      many,
	} {
		w := &WorkingSet{MemoryBytes: 1 << 20, Extents: ext}
		if name == "too many" {
			w.MemoryBytes = 1 << 30
		}
		if err := w.Validate(); err == nil {
			t.Errorf("%s: validated", name)
		}
		var b bytes.Buffer
		if err := EncodeWorkingSet(&b, w); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
	for name, in := range map[string]string{
		"unknown field": `{"MemorySum":1,"MemoryBytes":4096,"Extents":[],"Other":1}`,
		"trailing":      `{"MemorySum":1,"MemoryBytes":4096,"Extents":[]} {}`,
		"garbage":       `\x00\x01`,
		"huge":          `{"Extents":[` + strings.Repeat(`{"Off":0,"Len":4096},`, 10000) + `]}`,
	} {
		if _, err := DecodeWorkingSet(strings.NewReader(in)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestCoalesceExtents(t *testing.T) {
	var ext []Extent
	for i := range 5000 {
		ext = append(ext, Extent{Off: uint64(i) * 3 * 4096, Len: 4096})
	}
	total := uint64(5000*3-2) * 4096
	got := CoalesceExtents(append([]Extent(nil), ext...), MaxWorkingSetExtents)
	if len(got) > MaxWorkingSetExtents {
		t.Fatalf("%d extents after coalescing, want at most %d", len(got), MaxWorkingSetExtents)
	}
	if err := ValidateExtents(got, 1<<30); err != nil {
		t.Fatal(err)
	}
	// Every page of the input is still covered.
	var covered uint64
	for _, e := range got {
		covered += e.Len
	}
	if covered != total || got[0].Off != 0 {
		t.Fatalf("coalesced extents cover %d bytes from %#x, want %d from 0", covered, got[0].Off, total)
	}
	few := []Extent{{Off: 0, Len: 4096}, {Off: 1 << 20, Len: 4096}}
	if got := CoalesceExtents(append([]Extent(nil), few...), 2); !reflect.DeepEqual(got, few) {
		t.Fatalf("extents within the bound changed: %+v", got)
	}
}

// FuzzDecodeWorkingSet: whatever a record holds, DecodeWorkingSet returns
// a valid record or an error, never panics, and what it accepts encodes
// again to itself.
func FuzzDecodeWorkingSet(f *testing.F) {
	var b bytes.Buffer
	if err := EncodeWorkingSet(&b, sampleWorkingSet()); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(`{"Extents":[{"Off":4096,"Len":0}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := DecodeWorkingSet(bytes.NewReader(data))
		if err != nil {
			return
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("decoded an invalid record: %v", err)
		}
		var out bytes.Buffer
		if err := EncodeWorkingSet(&out, w); err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
		again, err := DecodeWorkingSet(&out)
		if err != nil || !reflect.DeepEqual(again, w) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
