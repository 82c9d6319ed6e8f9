package snapshot

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A recorded working set. A machine restored from a memory file reads its
// pages as the guest first touches them: each a fault, and, when the file
// is not in the page cache, a read of the disk, one page at a time in the
// order the guest happens to touch them. A template's restores touch
// nearly the same pages each time (the agent, the interpreter, the kernel
// paths they run), so the pages one restore touched up to its first
// cell's result say what the next restore will need. A working set is
// that record, kept beside a snapshot (a side file: the state file is
// written before the record exists, and none of its readers needs it),
// and a restore reads those ranges ahead, before its first vCPU runs.
//
// The record is a hint: a missing, stale or damaged one costs the
// prefetch, never the restore. It is tied to the memory file it was taken
// over by that file's sum (the state file header's) and size, and a
// record for another memory file is refused.

// MaxWorkingSetExtents bounds a working set's extents: each is one
// madvise call at restore, and the record travels in the VMM's spec.
// A record of more scattered pages is coalesced (CoalesceExtents).
const MaxWorkingSetExtents = 1024

// maxWorkingSetBytes bounds an encoded record (1024 extents of JSON).
const maxWorkingSetBytes = 128 << 10

// WorkingSet is the pages a restored machine touched, as extents of its
// memory image (the file offsets of Machine.Memory), sorted, apart and
// whole pages.
type WorkingSet struct {
	// MemorySum and MemoryBytes are the memory file's sum (MemorySum)
	// and size: the record is for that file only.
	MemorySum   uint32
	MemoryBytes uint64
	Extents     []Extent
}

// Bytes is how much of the image the record covers.
func (w *WorkingSet) Bytes() uint64 {
	var n uint64
	for _, e := range w.Extents {
		n += e.Len
	}
	return n
}

// Validate checks the record's extents against its MemoryBytes.
func (w *WorkingSet) Validate() error {
	return ValidateExtents(w.Extents, w.MemoryBytes)
}

// ValidateExtents checks extents of a working set over an image of size
// bytes: at most MaxWorkingSetExtents, whole pages, not empty, sorted and
// apart, inside the image.
func ValidateExtents(ext []Extent, size uint64) error {
	if len(ext) > MaxWorkingSetExtents {
		return fmt.Errorf("working set: %d extents, at most %d", len(ext), MaxWorkingSetExtents)
	}
	var end uint64
	for i, e := range ext {
		switch {
		case e.Len == 0 || e.Off%pageBytes != 0 || e.Len%pageBytes != 0:
			return fmt.Errorf("working set: extent %d (%#x+%#x) is not whole pages", i, e.Off, e.Len)
		case i > 0 && e.Off <= end:
			return fmt.Errorf("working set: extent %d (%#x) overlaps or touches the one before, or is out of order", i, e.Off)
		case e.Off >= size || e.Len > size-e.Off:
			return fmt.Errorf("working set: extent %d (%#x+%#x) is outside the %#x bytes of memory", i, e.Off, e.Len, size)
		}
		end = e.Off + e.Len
	}
	return nil
}

// CoalesceExtents merges sorted, apart extents until there are at most
// max: the nearest first (the gap between two extents joins them), so
// that what is read beyond the record is as little as it can be.
func CoalesceExtents(ext []Extent, max int) []Extent {
	if max < 1 {
		max = 1
	}
	for gap := uint64(pageBytes); len(ext) > max; gap *= 2 {
		out := ext[:1]
		for _, e := range ext[1:] {
			last := &out[len(out)-1]
			if e.Off-(last.Off+last.Len) <= gap {
				last.Len = e.Off + e.Len - last.Off
				continue
			}
			out = append(out, e)
		}
		ext = out
	}
	return ext
}

// EncodeWorkingSet writes w, checked, as JSON.
func EncodeWorkingSet(out io.Writer, w *WorkingSet) error {
	if err := w.Validate(); err != nil {
		return err
	}
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

// DecodeWorkingSet reads a record EncodeWorkingSet wrote, bounded, and
// checks it.
func DecodeWorkingSet(r io.Reader) (*WorkingSet, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxWorkingSetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("working set: %w", err)
	}
	if len(b) > maxWorkingSetBytes {
		return nil, fmt.Errorf("working set: more than %d bytes", maxWorkingSetBytes)
	}
	var w WorkingSet
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return nil, fmt.Errorf("working set: %w", err)
	}
	if d.More() {
		return nil, errors.New("working set: data after the record")
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	return &w, nil
}

// For checks that the record is for the memory file whose sum and size
// are given.
func (w *WorkingSet) For(sum uint32, size uint64) error {
	if w.MemorySum != sum || w.MemoryBytes != size {
		return fmt.Errorf("working set: recorded over a memory file of %d bytes summing to %08x, this one has %d bytes and %08x", w.MemoryBytes, w.MemorySum, size, sum)
	}
	return nil
}
