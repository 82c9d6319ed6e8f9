package cell

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Default limits for each output stream of a cell or command.
const (
	DefaultHeadBytes = 64 << 10
	DefaultTailBytes = 64 << 10
)

// Clipper keeps the first Head and the last Tail bytes written to it and
// counts the bytes in between, so a stream of any size costs at most
// Head+Tail bytes of memory. It implements io.Writer and never fails.
// A Clipper is not safe for concurrent use.
type Clipper struct {
	headMax int
	head    []byte
	// tail is a ring of at most tailMax bytes; tailStart is the index of
	// its oldest byte once the ring is full.
	tailMax   int
	tail      []byte
	tailStart int
	total     int64
}

// NewClipper returns a Clipper keeping head and tail bytes; negative limits
// count as zero.
func NewClipper(head, tail int) *Clipper {
	return &Clipper{headMax: max(head, 0), tailMax: max(tail, 0)}
}

// Write records p. It always returns len(p), nil.
func (c *Clipper) Write(p []byte) (int, error) {
	n := len(p)
	c.total += int64(n)
	if room := c.headMax - len(c.head); room > 0 {
		k := min(room, len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || c.tailMax == 0 {
		return n, nil
	}
	if len(p) >= c.tailMax {
		c.tail = append(c.tail[:0], p[len(p)-c.tailMax:]...)
		c.tailStart = 0
		return n, nil
	}
	if room := c.tailMax - len(c.tail); room > 0 {
		k := min(room, len(p))
		c.tail = append(c.tail, p[:k]...)
		p = p[k:]
	}
	// The ring is full: overwrite the oldest bytes.
	for len(p) > 0 {
		k := copy(c.tail[c.tailStart:], p)
		p = p[k:]
		c.tailStart = (c.tailStart + k) % c.tailMax
	}
	return n, nil
}

// Total is the number of bytes written so far.
func (c *Clipper) Total() int64 { return c.total }

// HeadRoom is how many more bytes fit in the head before bytes start to be
// cut or sent to the tail.
func (c *Clipper) HeadRoom() int { return c.headMax - len(c.head) }

// Cut is the number of bytes written but kept in neither head nor tail.
func (c *Clipper) Cut() int64 { return c.total - int64(len(c.head)) - int64(len(c.tail)) }

// Bytes returns the kept head and tail, in order, and the number of bytes
// cut between them.
func (c *Clipper) Bytes() (head, tail []byte, cut int64) {
	tail = make([]byte, 0, len(c.tail))
	tail = append(tail, c.tail[c.tailStart:]...)
	tail = append(tail, c.tail[:c.tailStart]...)
	return append([]byte(nil), c.head...), tail, c.Cut()
}

// Text returns the kept output as valid UTF-8 text and the number of bytes
// cut. When bytes were cut, a marker line stating the amount sits where
// they were, and partial characters at the cut are dropped and counted as
// cut; invalid UTF-8 elsewhere becomes U+FFFD.
func (c *Clipper) Text() (string, int64) {
	head, tail, cut := c.Bytes()
	if cut == 0 {
		return toValidUTF8(append(head, tail...)), 0
	}
	trimmedHead := trimPartialEnd(head)
	trimmedTail := trimPartialStart(tail)
	cut += int64(len(head)-len(trimmedHead)) + int64(len(tail)-len(trimmedTail))
	return toValidUTF8(trimmedHead) + CutMarker(cut) + toValidUTF8(trimmedTail), cut
}

// CutMarker is the line that stands in for cut output.
func CutMarker(cut int64) string {
	return fmt.Sprintf("\n... [%d bytes cut] ...\n", cut)
}

// PartialRuneLen returns how many bytes at the end of p are the start of a
// UTF-8 sequence that p does not complete (0 to 3). Stream readers hold
// those bytes back until the next read, so text events never split a
// character.
func PartialRuneLen(p []byte) int {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(p); i++ {
		b := p[len(p)-i]
		if b < 0x80 {
			return 0 // ASCII: nothing pending
		}
		if !utf8.RuneStart(b) {
			continue // continuation byte: look further back
		}
		need := 0
		switch {
		case b&0xE0 == 0xC0:
			need = 2
		case b&0xF0 == 0xE0:
			need = 3
		case b&0xF8 == 0xF0:
			need = 4
		default:
			return 0 // invalid lead byte: nothing to wait for
		}
		if need > i {
			return i
		}
		return 0
	}
	return 0
}

func trimPartialEnd(p []byte) []byte { return p[:len(p)-PartialRuneLen(p)] }

func trimPartialStart(p []byte) []byte {
	i := 0
	for i < len(p) && i < utf8.UTFMax-1 && !utf8.RuneStart(p[i]) {
		i++
	}
	return p[i:]
}

func toValidUTF8(p []byte) string {
	if utf8.Valid(p) {
		return string(p)
	}
	return strings.ToValidUTF8(string(p), "\uFFFD")
}
