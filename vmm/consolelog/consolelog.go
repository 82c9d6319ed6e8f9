// Package consolelog keeps a VM's console log under a size cap while
// keeping its most recent output.
//
// Everything the guest prints on its serial console is guest-controlled,
// and the daemon's state directory defaults to /run, a tmpfs: an uncapped
// console.log is a way for a guest to fill the host's memory. So the VMM
// writes its console through a File, which lets the log grow to Max bytes
// and then compacts it in place: the newest half is moved to the front,
// after a line saying how many bytes were dropped, and writing goes on
// from there. The file thus always holds between Max/2 and Max bytes of
// the latest output once it has filled, at an amortized cost of one copy
// per byte written.
//
// Compaction works on the open descriptor alone (pread, pwrite,
// ftruncate), so the VMM needs no path to the file: the daemon opens it
// and hands it over as the process's stdout, read-write and without
// O_APPEND (with O_APPEND, Linux's pwrite ignores the offset).
package consolelog

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// MinMax is the smallest cap a File accepts: below it the marker line
// would take a noticeable part of the log.
const MinMax = 64 << 10

// DefaultMax is the cap the daemon uses unless configured otherwise.
const DefaultMax = 4 << 20

// File is a capped console log over an open file. It is safe for
// concurrent use.
type File struct {
	f   *os.File
	max int64

	mu      sync.Mutex
	size    int64 // the file's length as this File wrote it
	dropped int64 // bytes dropped by compactions so far
	marker  int64 // length of the marker line at the file's start (0: none)
	err     error // the first write error; later writes fail with it
	buf     []byte
}

// New returns a File that appends to f (from its current length) and
// keeps it at most max bytes long (max >= MinMax). f must be open for
// reading and writing and not in append mode.
func New(f *os.File, max int64) (*File, error) {
	if max < MinMax {
		return nil, fmt.Errorf("console log cap %d bytes is below the minimum %d", max, MinMax)
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	if fl&unix.O_ACCMODE != unix.O_RDWR {
		return nil, errors.New("console log: the file must be open for reading and writing, to be compacted in place")
	}
	if fl&unix.O_APPEND != 0 {
		return nil, errors.New("console log: the file must not be in append mode, to be compacted in place")
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("console log: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("console log: %s is not a regular file", f.Name())
	}
	c := &File{f: f, max: max, size: st.Size()}
	if c.size > max {
		if err := c.compact(nil); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Max is the cap.
func (c *File) Max() int64 { return c.max }

// Dropped is how many bytes of output compactions have dropped.
func (c *File) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Write appends p, compacting first if the file would pass its cap. It
// never writes past the cap.
func (c *File) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.size+int64(len(p)) > c.max {
		if err := c.compact(p); err != nil {
			c.err = err
			return 0, err
		}
		return len(p), nil
	}
	if _, err := c.f.WriteAt(p, c.size); err != nil {
		c.err = fmt.Errorf("console log: %w", err)
		return 0, c.err
	}
	c.size += int64(len(p))
	return len(p), nil
}

// compact rewrites the file as a marker line followed by the newest bytes
// of the file's content and then p, about half the cap in all. Called
// with mu held.
func (c *File) compact(p []byte) error {
	total := c.size - c.marker + int64(len(p)) // output bytes, without the old marker
	// The marker counts every byte dropped so far, its own length included
	// in the sum; a few rounds settle the count's number of digits.
	var marker []byte
	for range 3 {
		keep := c.max/2 - int64(len(marker))
		marker = fmt.Appendf(marker[:0], "[cellvm: console log capped at %d bytes; %d earlier bytes dropped]\n", c.max, c.dropped+total-keep)
	}
	keep := c.max/2 - int64(len(marker))
	c.dropped += total - keep
	// From p: its last min(len(p), keep) bytes; from the file: the rest.
	fromP := min(int64(len(p)), keep)
	fromFile := keep - fromP
	dst := int64(len(marker))
	if fromFile > 0 {
		// Move the file's tail forward to just after the marker. The source
		// lies after the destination, so copying in ascending chunks never
		// overwrites bytes still to be read.
		if c.buf == nil {
			c.buf = make([]byte, 64<<10)
		}
		src := c.size - fromFile
		for moved := int64(0); moved < fromFile; {
			n := min(int64(len(c.buf)), fromFile-moved)
			if _, err := c.f.ReadAt(c.buf[:n], src+moved); err != nil {
				return fmt.Errorf("console log: compact: %w", err)
			}
			if _, err := c.f.WriteAt(c.buf[:n], dst+moved); err != nil {
				return fmt.Errorf("console log: compact: %w", err)
			}
			moved += n
		}
	}
	if _, err := c.f.WriteAt(marker, 0); err != nil {
		return fmt.Errorf("console log: compact: %w", err)
	}
	if fromP > 0 {
		if _, err := c.f.WriteAt(p[int64(len(p))-fromP:], dst+fromFile); err != nil {
			return fmt.Errorf("console log: compact: %w", err)
		}
	}
	c.size = dst + keep
	c.marker = dst
	if err := c.f.Truncate(c.size); err != nil {
		return fmt.Errorf("console log: compact: %w", err)
	}
	return nil
}
