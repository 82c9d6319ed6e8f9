package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxBytes     = 64 << 20
	DefaultKeep         = 5
	DefaultMaxCodeBytes = 16 << 10
	// MaxCodeBytesLimit is the most Options.MaxCodeBytes may be: a line
	// must stay under MaxLineBytes with its code escaped.
	MaxCodeBytesLimit = 128 << 10
)

// ErrClosed is Write's error after Close.
var ErrClosed = errors.New("audit: log closed")

// Options set a Log's rotation and what it keeps of code.
type Options struct {
	// MaxBytes: a record that would take the file past it rotates the
	// file first. 0 means DefaultMaxBytes.
	MaxBytes int64
	// Keep is how many rotated files are kept (FILE.1 ... FILE.Keep).
	// 0 means DefaultKeep.
	Keep int
	// FullCode keeps a cell's code (or an exec's argv) in the record,
	// clipped to MaxCodeBytes; otherwise only its digest and size.
	FullCode bool
	// MaxCodeBytes bounds the code kept; 0 means DefaultMaxCodeBytes.
	MaxCodeBytes int
}

// Log appends records to a file. It is safe for concurrent use; Write
// holds a mutex only around the write itself and a rotation.
type Log struct {
	path string
	opt  Options

	mu     sync.Mutex
	f      *os.File
	size   int64
	closed bool
}

// Open opens (creating, mode 0600, with its directory) the log at path
// for appending.
func Open(path string, opt Options) (*Log, error) {
	if opt.MaxBytes == 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.Keep == 0 {
		opt.Keep = DefaultKeep
	}
	if opt.MaxCodeBytes == 0 {
		opt.MaxCodeBytes = DefaultMaxCodeBytes
	}
	switch {
	case path == "":
		return nil, errors.New("audit log: no path given")
	case opt.MaxBytes < 4096:
		return nil, fmt.Errorf("audit log: a rotation size of %d bytes is below 4096", opt.MaxBytes)
	case opt.Keep < 1 || opt.Keep > 1000:
		return nil, fmt.Errorf("audit log: keep %d rotated files: want 1 to 1000", opt.Keep)
	case opt.MaxCodeBytes < 0 || opt.MaxCodeBytes > MaxCodeBytesLimit:
		return nil, fmt.Errorf("audit log: code bound %d bytes: want 1 to %d", opt.MaxCodeBytes, MaxCodeBytesLimit)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("audit log %s is not a regular file", path)
	}
	return &Log{path: path, opt: opt, f: f, size: fi.Size()}, nil
}

func openAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return f, nil
}

// Path is the file the log writes.
func (l *Log) Path() string { return l.path }

// Write appends rec as one line, with one write(2), and returns once the
// kernel has it. A zero Time is the present. Fields are clipped to their
// bounds (see the package documentation), and Code is dropped unless the
// log keeps code.
func (l *Log) Write(rec Record) error {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	rec.Time = rec.Time.UTC()
	rec = bound(rec, l.opt.FullCode, l.opt.MaxCodeBytes)
	b, err := json.Marshal(rec)
	if err == nil && len(b) >= MaxLineBytes {
		rec.Code, rec.CodeClipped = "", rec.Code != ""
		b, err = json.Marshal(rec)
	}
	if err != nil {
		return fmt.Errorf("audit record: %w", err)
	}
	b = append(b, '\n')

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	var rotErr error
	if l.size > 0 && l.size+int64(len(b)) > l.opt.MaxBytes {
		// A failed rotation keeps the current file: the record is
		// written all the same, and the next one tries again.
		rotErr = l.rotate()
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		return errors.Join(fmt.Errorf("audit log %s: %w", l.path, err), rotErr)
	}
	return rotErr
}

// rotate moves FILE to FILE.1 (and FILE.i to FILE.i+1, dropping the
// oldest) and starts a new FILE. The new file is made first, so a failure
// moves nothing.
func (l *Log) rotate() error {
	tmp := l.path + ".new"
	nf, err := os.OpenFile(tmp, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("audit log rotation: %w", err)
	}
	for i := l.opt.Keep - 1; i >= 1; i-- {
		if err := os.Rename(rotated(l.path, i), rotated(l.path, i+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			nf.Close()
			os.Remove(tmp)
			return fmt.Errorf("audit log rotation: %w", err)
		}
	}
	if err := os.Rename(l.path, rotated(l.path, 1)); err != nil {
		nf.Close()
		os.Remove(tmp)
		return fmt.Errorf("audit log rotation: %w", err)
	}
	if err := os.Rename(tmp, l.path); err != nil {
		// FILE.1 is the current file still; keep writing to it.
		nf.Close()
		os.Remove(tmp)
		return fmt.Errorf("audit log rotation: %w", err)
	}
	l.f.Close()
	l.f, l.size = nf, 0
	return nil
}

// rotated is the name of the i-th rotated file of path.
func rotated(path string, i int) string { return path + "." + strconv.Itoa(i) }

// Files returns path's rotated files that exist, oldest first, then path:
// the order to read them in.
func Files(path string) []string {
	var out []string
	for i := 1; ; i++ {
		if _, err := os.Stat(rotated(path, i)); err != nil {
			break
		}
		out = append([]string{rotated(path, i)}, out...)
	}
	return append(out, path)
}

// Close closes the file. It is idempotent; Write after it is ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}
