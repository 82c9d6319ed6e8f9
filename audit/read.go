package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Filter selects records; a zero field selects all.
type Filter struct {
	Tenant  string
	Sandbox string
	// Since keeps records at or after this time.
	Since time.Time
}

// Match reports whether rec passes f.
func (f Filter) Match(rec *Record) bool {
	return (f.Tenant == "" || rec.Tenant == f.Tenant) &&
		(f.Sandbox == "" || rec.Sandbox == f.Sandbox) &&
		(f.Since.IsZero() || !rec.Time.Before(f.Since))
}

// BadLinesError is Read's error when lines other than the last were not
// records: they were skipped, and the others were read.
type BadLinesError struct {
	Count int
	// First holds the first few, with their line numbers.
	First []error
}

func (e *BadLinesError) Error() string {
	s := make([]string, len(e.First))
	for i, err := range e.First {
		s[i] = err.Error()
	}
	more := ""
	if e.Count > len(e.First) {
		more = fmt.Sprintf(" (and %d more)", e.Count-len(e.First))
	}
	return fmt.Sprintf("%d lines are not audit records, skipped: %s%s", e.Count, strings.Join(s, "; "), more)
}

const maxBadReported = 5

// Read calls fn with each record of r that f matches, in order, and stops
// at fn's first error, which it returns. A line that is not a record is
// skipped and, unless it is the last line (the torn end a writer killed
// mid-line leaves), reported in a *BadLinesError returned once the rest
// is read.
func Read(r io.Reader, f Filter, fn func(Record) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var bad BadLinesError
	var pending error // the latest bad line, reported if another follows
	for n := 1; ; n++ {
		line, err := readLine(br)
		if len(line) == 0 && err == io.EOF {
			break
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("reading the audit log at line %d: %w", n, err)
		}
		if pending != nil {
			bad.add(pending)
			pending = nil
		}
		rec, perr := parseLine(line)
		if perr != nil {
			pending = fmt.Errorf("line %d: %w", n, perr)
		} else if f.Match(&rec) {
			if ferr := fn(rec); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			break
		}
	}
	if bad.Count > 0 {
		return &bad
	}
	return nil
}

func (b *BadLinesError) add(err error) {
	b.Count++
	if len(b.First) < maxBadReported {
		b.First = append(b.First, err)
	}
}

// errLineTooLong marks a line over MaxLineBytes, of which readLine
// returns nothing.
var errLineTooLong = fmt.Errorf("longer than %d bytes", MaxLineBytes)

// readLine returns the next line without its newline; io.EOF with the
// last, unterminated one (or nothing). A line over MaxLineBytes is read
// through and returned as a marker that parseLine refuses.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > MaxLineBytes+1 {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err != nil && err != io.EOF:
			return nil, err
		}
		if long {
			line = []byte(tooLongMarker)
		}
		if err == nil {
			return bytes.TrimSuffix(line, []byte("\n")), nil
		}
		return line, io.EOF
	}
}

const tooLongMarker = "\x00too long"

// parseLine decodes one line into a record; an empty line or one that is
// not exactly a JSON object with an action and a time is an error.
func parseLine(line []byte) (Record, error) {
	var rec Record
	if string(line) == tooLongMarker {
		return rec, errLineTooLong
	}
	if len(bytes.TrimSpace(line)) == 0 {
		return rec, errors.New("empty line")
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return rec, fmt.Errorf("not JSON: %v", err)
	}
	if rec.Action == "" || rec.Time.IsZero() {
		return rec, errors.New("a JSON object without time and action")
	}
	return rec, nil
}
