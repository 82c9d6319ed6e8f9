package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// followPoll is how often Follow looks for new lines and a rotation.
var followPoll = 200 * time.Millisecond

// Follow calls fn with each record of the file at path that f matches,
// from the file's start, then with each one appended, until ctx is done
// (it returns nil) or fn fails (it returns fn's error). It follows path
// across rotation: once path is a new file, the old one is read to its end
// and the new one from its start (a file rotated away and past within one
// poll is missed). A line that is not a record goes to bad (when not nil)
// and is skipped; a line without its newline is held until the newline
// comes, and dropped as torn if the file is rotated or truncated first.
// A path that does not exist yet is waited for.
func Follow(ctx context.Context, path string, f Filter, fn func(Record) error, bad func(error)) error {
	t := &tail{path: path, filter: f, fn: fn, bad: bad}
	defer t.close()
	for {
		if err := t.step(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followPoll):
		}
	}
}

type tail struct {
	path   string
	filter Filter
	fn     func(Record) error
	bad    func(error)

	file   *os.File
	offset int64
	buf    []byte // the unterminated end of what was read
	skip   bool   // dropping the rest of a line over MaxLineBytes
	line   int
}

func (t *tail) close() {
	if t.file != nil {
		t.file.Close()
		t.file = nil
	}
}

// step reads what is new and moves to a new file after a rotation.
func (t *tail) step() error {
	for {
		if t.file == nil {
			f, err := os.Open(t.path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("audit log: %w", err)
			}
			t.file, t.offset, t.buf, t.skip, t.line = f, 0, nil, false, 0
		}
		if err := t.drain(); err != nil {
			return err
		}
		cur, err := t.file.Stat()
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		now, err := os.Stat(t.path)
		switch {
		case err == nil && !os.SameFile(cur, now):
			// Rotated: what the writer put in the old file before it
			// moved on is there now.
			if err := t.drain(); err != nil {
				return err
			}
			t.close()
			continue
		case cur.Size() < t.offset:
			// Truncated in place: start again.
			if _, err := t.file.Seek(0, io.SeekStart); err != nil {
				return fmt.Errorf("audit log: %w", err)
			}
			t.offset, t.buf, t.skip, t.line = 0, nil, false, 0
			continue
		}
		return nil
	}
}

// drain reads the file to its end, handing on each whole line.
func (t *tail) drain() error {
	chunk := make([]byte, 64<<10)
	for {
		n, err := t.file.Read(chunk)
		t.offset += int64(n)
		if ferr := t.feed(chunk[:n]); ferr != nil {
			return ferr
		}
		if err == io.EOF || n == 0 {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
	}
}

func (t *tail) feed(b []byte) error {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !t.skip {
				t.buf = append(t.buf, b...)
				if len(t.buf) > MaxLineBytes {
					t.skip, t.buf = true, nil
				}
			}
			return nil
		}
		line := b[:i]
		b = b[i+1:]
		t.line++
		if t.skip {
			t.skip = false
			t.report(fmt.Errorf("line %d: %w", t.line, errLineTooLong))
			continue
		}
		if len(t.buf) > 0 {
			line = append(t.buf, line...)
			t.buf = nil
		}
		rec, err := parseLine(line)
		if err != nil {
			t.report(fmt.Errorf("line %d: %w", t.line, err))
			continue
		}
		if t.filter.Match(&rec) {
			if err := t.fn(rec); err != nil {
				return err
			}
		}
	}
	return nil
}

func (t *tail) report(err error) {
	if t.bad != nil {
		t.bad(err)
	}
}
