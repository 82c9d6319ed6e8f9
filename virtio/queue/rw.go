package queue

import (
	"errors"
	"io"

	"github.com/cellvm/cellvm/guestmem"
)

// ErrChainFull is returned by Writer.Write when the chain's writable buffers
// are used up.
var ErrChainFull = errors.New("descriptor chain has no writable space left")

// Reader reads a chain's device-readable buffers in order, as one stream.
type Reader struct {
	mem  guestmem.Memory
	bufs []Buffer
	off  uint32 // offset into bufs[0]
	left uint32
}

// NewReader returns a reader over c's readable part.
func (c *Chain) NewReader(mem guestmem.Memory) *Reader {
	return &Reader{mem: mem, bufs: c.Readable, left: c.ReadableLen}
}

// Remaining is the number of bytes not yet read.
func (r *Reader) Remaining() uint32 { return r.left }

// Next returns up to max bytes of the next buffer as a slice of guest
// memory, without copying, and consumes them. It returns io.EOF at the end.
func (r *Reader) Next(max int) ([]byte, error) {
	if len(r.bufs) == 0 || max <= 0 {
		if len(r.bufs) == 0 {
			return nil, io.EOF
		}
		return nil, nil
	}
	b := r.bufs[0]
	n := b.Len - r.off
	if uint64(n) > uint64(max) {
		n = uint32(max)
	}
	s, err := r.mem.Slice(b.Addr+uint64(r.off), uint64(n))
	if err != nil {
		return nil, err
	}
	r.off += n
	r.left -= n
	if r.off == b.Len {
		r.bufs, r.off = r.bufs[1:], 0
	}
	return s, nil
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	total := 0
	for total < len(p) {
		s, err := r.Next(len(p) - total)
		if err == io.EOF {
			if total == 0 {
				return 0, io.EOF
			}
			break
		}
		if err != nil {
			return total, err
		}
		total += copy(p[total:], s)
	}
	return total, nil
}

// Writer writes a chain's device-writable buffers in order, as one stream.
type Writer struct {
	mem     guestmem.Memory
	bufs    []Buffer
	off     uint32
	left    uint32
	written uint32
}

// NewWriter returns a writer over c's writable part.
func (c *Chain) NewWriter(mem guestmem.Memory) *Writer {
	return &Writer{mem: mem, bufs: c.Writable, left: c.WritableLen}
}

// Remaining is the writable space left.
func (w *Writer) Remaining() uint32 { return w.left }

// Written is the number of bytes written so far: the length to Push.
func (w *Writer) Written() uint32 { return w.written }

// Next returns up to max bytes of the next writable buffer as a slice of
// guest memory and counts them as written. It returns ErrChainFull at the
// end.
func (w *Writer) Next(max int) ([]byte, error) {
	if len(w.bufs) == 0 {
		return nil, ErrChainFull
	}
	if max <= 0 {
		return nil, nil
	}
	b := w.bufs[0]
	n := b.Len - w.off
	if uint64(n) > uint64(max) {
		n = uint32(max)
	}
	s, err := w.mem.Slice(b.Addr+uint64(w.off), uint64(n))
	if err != nil {
		return nil, err
	}
	// Marked before the caller writes (a checkpoint drains the devices
	// before it reads the log): guestmem's dirty.go.
	guestmem.MarkDirty(w.mem, b.Addr+uint64(w.off), uint64(n))
	w.off += n
	w.left -= n
	w.written += n
	if w.off == b.Len {
		w.bufs, w.off = w.bufs[1:], 0
	}
	return s, nil
}

// Write implements io.Writer. A short write returns ErrChainFull.
func (w *Writer) Write(p []byte) (int, error) {
	total := 0
	for total < len(p) {
		s, err := w.Next(len(p) - total)
		if err != nil {
			return total, err
		}
		total += copy(s, p[total:])
	}
	return total, nil
}
