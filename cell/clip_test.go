package cell

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestClipperKeepsEverythingWhenSmall(t *testing.T) {
	c := NewClipper(8, 8)
	c.Write([]byte("hello "))
	c.Write([]byte("world"))
	text, cut := c.Text()
	if text != "hello world" || cut != 0 {
		t.Fatalf("Text() = %q, %d; want %q, 0", text, cut, "hello world")
	}
}

// TestClipperMatchesReference writes random chunk sizes and compares head,
// tail and cut against a plain in-memory copy of the whole stream.
func TestClipperMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 200; iter++ {
		headMax, tailMax := rng.IntN(50), rng.IntN(50)
		c := NewClipper(headMax, tailMax)
		var all []byte
		for range rng.IntN(30) {
			chunk := make([]byte, rng.IntN(40))
			for i := range chunk {
				chunk[i] = byte('a' + rng.IntN(26))
			}
			all = append(all, chunk...)
			if n, err := c.Write(chunk); n != len(chunk) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
		}
		head, tail, cut := c.Bytes()
		wantHead := all[:min(headMax, len(all))]
		rest := all[len(wantHead):]
		wantTail := rest[len(rest)-min(tailMax, len(rest)):]
		if !bytes.Equal(head, wantHead) || !bytes.Equal(tail, wantTail) {
			t.Fatalf("iter %d (h=%d t=%d): head %q tail %q; want %q %q", iter, headMax, tailMax, head, tail, wantHead, wantTail)
		}
		if want := int64(len(all) - len(wantHead) - len(wantTail)); cut != want {
			t.Fatalf("cut = %d, want %d", cut, want)
		}
		if c.Total() != int64(len(all)) {
			t.Fatalf("Total = %d, want %d", c.Total(), len(all))
		}
	}
}

func TestClipperBoundedMemory(t *testing.T) {
	c := NewClipper(1024, 1024)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 64 {
		c.Write(chunk)
	}
	if cap(c.head) > 2048 || cap(c.tail) > 2048 {
		t.Fatalf("buffers grew: head cap %d, tail cap %d", cap(c.head), cap(c.tail))
	}
	if want := int64(64<<20 - 2048); c.Cut() != want {
		t.Fatalf("Cut = %d, want %d", c.Cut(), want)
	}
}

func TestClipperTextMarksCutAndKeepsUTF8(t *testing.T) {
	c := NewClipper(4, 3)
	// "é" is 2 bytes: the 4-byte head boundary falls inside the second "é"
	// and the 3-byte tail boundary inside the next to last one.
	c.Write([]byte("aéé" + strings.Repeat("-", 100) + "éé"))
	text, cut := c.Text()
	if !utf8.ValidString(text) {
		t.Fatalf("Text is not valid UTF-8: %q", text)
	}
	if !strings.HasPrefix(text, "aé\n... [") || !strings.HasSuffix(text, "] ...\né") {
		t.Fatalf("Text = %q", text)
	}
	if !strings.Contains(text, CutMarker(cut)) {
		t.Fatalf("Text %q lacks marker for %d bytes", text, cut)
	}
	// total 3+2+100+4 = 109 bytes; shown "aé" (3) and "é" (2).
	if cut != 109-5 {
		t.Fatalf("cut = %d, want %d", cut, 109-5)
	}
}

func TestPartialRuneLen(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"abc", 0},
		{"é", 0},
		{"\xc3", 1},
		{"a\xe2\x82", 2},
		{"\xe2\x82\xac", 0},
		{"\xf0\x9f\x98", 3},
		{"\xf0\x9f\x98\x80", 0},
		{"\xff", 0},
		{"", 0},
	} {
		if got := PartialRuneLen([]byte(tc.in)); got != tc.want {
			t.Errorf("PartialRuneLen(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
