package build

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/cellvm/cellvm/image/buildplan"
)

// Bounds on what the builder reports.
const (
	maxLine = 4096
	// maxProgressFile bounds the output lines kept in the progress file;
	// step and failure lines are always written.
	maxProgressFile = 32 << 20
)

// progress writes the builder's lines to stdout and to the progress file.
type progress struct {
	mu      sync.Mutex
	out     io.Writer
	file    *os.File
	written int64
	dropped bool
}

func openProgress(out io.Writer, file string) (*progress, error) {
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("progress file: %w", err)
	}
	return &progress{out: out, file: f}, nil
}

func (p *progress) close() {
	if p.file != nil {
		p.file.Close()
	}
}

func (p *progress) write(line string, always bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.out, line)
	if p.file == nil {
		return
	}
	if !always && p.written+int64(len(line)) > maxProgressFile {
		if !p.dropped {
			p.dropped = true
			p.file.WriteString("(more output left out of this file)\n")
		}
		return
	}
	n, _ := p.file.WriteString(line + "\n")
	p.written += int64(n)
}

// Step reports a step's start.
func (p *progress) Step(name string) { p.write(buildplan.StepPrefix+name, true) }

// Failed reports a failed step and its error.
func (p *progress) Failed(step string, err error) {
	p.write(buildplan.FailedPrefix+step, true)
	for _, l := range strings.Split(err.Error(), "\n") {
		p.write(clean(l), true)
	}
}

// Printf reports a line of output.
func (p *progress) Printf(format string, args ...any) {
	p.write(clean(fmt.Sprintf(format, args...)), false)
}

// clean bounds a line and keeps it from reading as a step or failure
// line, or as a terminal's control sequence.
func clean(s string) string {
	if len(s) > maxLine {
		s = s[:maxLine] + "..."
	}
	s = strings.Map(func(r rune) rune {
		if r == '\t' || r >= 0x20 && r != 0x7f {
			return r
		}
		return '?'
	}, s)
	if strings.HasPrefix(s, buildplan.StepPrefix) || strings.HasPrefix(s, buildplan.FailedPrefix) {
		s = "  " + s
	}
	return s
}

// lineWriter turns a command's output into progress lines: split at
// "\n" or "\r", each at most maxLine bytes.
type lineWriter struct {
	p    *progress
	buf  []byte
	skip bool // the rest of an over-long line
}

func (w *lineWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			w.add(b)
			break
		}
		w.add(b[:i])
		w.flush()
		w.skip = false
		b = b[i+1:]
	}
	return n, nil
}

func (w *lineWriter) add(b []byte) {
	if w.skip {
		return
	}
	if len(w.buf)+len(b) > maxLine {
		w.buf = append(w.buf, b[:maxLine-len(w.buf)]...)
		w.flush()
		w.skip = true
		return
	}
	w.buf = append(w.buf, b...)
}

func (w *lineWriter) flush() {
	if len(w.buf) > 0 && !w.skip {
		w.p.Printf("%s", w.buf)
	}
	w.buf = w.buf[:0]
}

// Close reports what is left of the last line.
func (w *lineWriter) Close() error {
	w.flush()
	return nil
}

// limitBuffer keeps the first max bytes written to it.
type limitBuffer struct {
	max int
	b   []byte
}

func (l *limitBuffer) Write(b []byte) (int, error) {
	if room := l.max - len(l.b); room > 0 {
		if len(b) > room {
			l.b = append(l.b, b[:room]...)
		} else {
			l.b = append(l.b, b...)
		}
	}
	return len(b), nil
}

func (l *limitBuffer) String() string { return string(l.b) }
