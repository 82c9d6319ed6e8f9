package interp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// frame is one message from the driver (see PROTOCOL.md). Unknown fields
// and unknown "ev" values are ignored.
type frame struct {
	Ev string `json:"ev"`
	// ready
	Pid     int    `json:"pid"`
	Version string `json:"version"`
	// result
	Main bool              `json:"main"`
	Data map[string]string `json:"data"`
	// error
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
	// done
	Status      string `json:"status"`
	Interrupted bool   `json:"interrupted"`
	// reaped
	N int `json:"n"`
	// reseeded
	NumPy bool `json:"numpy"`
}

// command is one message to the driver.
type command struct {
	Op   string `json:"op"`
	N    int    `json:"n,omitempty"`
	Code string `json:"code,omitempty"`
	// Lang is the cell's language where the runtime runs more than one
	// (a "typescript" cell in Node's session).
	Lang string `json:"lang,omitempty"`
}

// errFrameTooLong means the driver sent a line longer than the limit: the
// interpreter is broken or hostile and is replaced.
var errFrameTooLong = errors.New("protocol frame too long")

// frameReader splits the non-blocking event pipe into NDJSON frames of
// bounded size.
type frameReader struct {
	fd    int
	max   int
	buf   []byte
	chunk []byte
	eof   bool
}

func newFrameReader(fd, max int) *frameReader {
	return &frameReader{fd: fd, max: max, chunk: make([]byte, 64<<10)}
}

// fill reads once from the pipe. It returns io.EOF at end of stream and nil
// when nothing is available now.
func (r *frameReader) fill() error {
	if r.eof {
		return io.EOF
	}
	n, err := unix.Read(r.fd, r.chunk)
	switch {
	case n > 0:
		r.buf = append(r.buf, r.chunk[:n]...)
		return nil
	case err == unix.EAGAIN || err == unix.EINTR:
		return nil
	case err != nil:
		r.eof = true
		return fmt.Errorf("read events: %w", err)
	default:
		r.eof = true
		return io.EOF
	}
}

// next returns the next complete frame, or ok false when none is buffered.
func (r *frameReader) next() (f frame, ok bool, err error) {
	for {
		i := bytes.IndexByte(r.buf, '\n')
		if i < 0 {
			if len(r.buf) > r.max {
				return frame{}, false, errFrameTooLong
			}
			return frame{}, false, nil
		}
		if i > r.max {
			return frame{}, false, errFrameTooLong
		}
		line := r.buf[:i]
		var fr frame
		jerr := json.Unmarshal(line, &fr)
		r.buf = r.buf[i+1:]
		if len(r.buf) == 0 {
			r.buf = nil // let a large buffer go
		}
		if jerr != nil {
			continue // garbage line: skip it, keep the session
		}
		return fr, true, nil
	}
}
