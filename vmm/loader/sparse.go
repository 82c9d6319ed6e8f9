package loader

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/cellvm/cellvm/guestmem"
)

// Loading into fresh guest memory writes only what is not zero already.
//
// A machine's guest memory is a fresh anonymous mapping: every page of it
// reads zero until something writes it, and the first write is what costs
// (a page fault, and a page the VMM then holds for the guest's life). A
// vmlinux's segments are a quarter zero pages (section alignment, zeroed
// data) and its bss is 1.6 MiB more that the guest may never touch; an
// initrd's files have runs of zeros too. So the loader reads the file in
// chunks, and a page of it that is all zero is written only where guest
// memory does not already read zero there. Reading a fresh page maps the
// kernel's shared zero page and allocates nothing. The guest sees the
// same bytes either way; a page it never writes is never the VMM's.

// loadChunk is the bounce buffer's size: the file is read through it, so
// its zero pages can be told before they reach guest memory. It is small:
// what the VMM's heap grows to stays in its RSS (a megabyte's buffer per
// segment made a cold-booted VMM's overhead 3.5 MiB larger in the rig).
const loadChunk = 64 << 10

// chunks keeps one bounce buffer for a kernel's segments and its initrd.
var chunks = sync.Pool{New: func() any { return new([loadChunk]byte) }}

// zeroPage is one page of zeros to compare with.
var zeroPage [pageSize]byte

const pageSize = 4096

// copyIn copies n bytes at file offset off of r to guest address addr,
// leaving alone the pages of the range that are zero in both.
func copyIn(mem guestmem.Memory, r io.ReaderAt, off, n int64, addr uint64) error {
	dst, err := mem.Slice(addr, uint64(n))
	if err != nil {
		return err
	}
	chunk := chunks.Get().(*[loadChunk]byte)
	defer chunks.Put(chunk)
	buf := chunk[:]
	for done := int64(0); done < n; {
		c := min(int64(len(buf)), n-done)
		got, err := r.ReadAt(buf[:c], off+done)
		if int64(got) != c {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("read %d bytes at offset %d: %w", n, off, err)
		}
		copyPages(dst[done:done+c], buf[:c])
		done += c
	}
	return nil
}

// copyPages copies src to dst a page at a time, skipping each page that
// reads zero in both.
func copyPages(dst, src []byte) {
	for len(src) > 0 {
		k := min(len(src), pageSize)
		if !isZero(src[:k]) || !isZero(dst[:k]) {
			copy(dst[:k], src[:k])
		}
		dst, src = dst[k:], src[k:]
	}
}

// clearPages zeroes b a page at a time, writing only the pages that do
// not read zero already.
func clearPages(b []byte) {
	for len(b) > 0 {
		k := min(len(b), pageSize)
		if !isZero(b[:k]) {
			clear(b[:k])
		}
		b = b[k:]
	}
}

// isZero says whether b, at most a page, is all zero bytes.
func isZero(b []byte) bool { return bytes.Equal(b, zeroPage[:len(b)]) }
