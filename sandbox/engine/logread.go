package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// logPoll is how often a followed log file is looked at for new lines.
const logPoll = 200 * time.Millisecond

// logFilter keeps the lines of a log source that a file holds.
func logFilter(src sandbox.LogSource) func(string) bool {
	if src != sandbox.LogAgent {
		return func(string) bool { return true }
	}
	// The guest's init and agent log with slog's text handler to the
	// console ("time=... level=INFO msg=..."), and a fatal error as
	// "cellvm-init: ...".
	return func(l string) bool {
		return strings.HasPrefix(l, "time=") && strings.Contains(l, " level=") || strings.HasPrefix(l, "cellvm-init:")
	}
}

// logLine makes a LogLine of raw bytes from a log, cut to MaxLogLineBytes
// and made valid UTF-8 (the guest writes the console).
func logLine(src sandbox.LogSource, raw []byte) sandbox.LogLine {
	raw = bytes.TrimRight(raw, "\r")
	l := sandbox.LogLine{Source: src}
	if len(raw) > sandbox.MaxLogLineBytes {
		l.Cut = len(raw) - sandbox.MaxLogLineBytes
		raw = raw[:sandbox.MaxLogLineBytes]
	}
	l.Text = strings.ToValidUTF8(string(raw), "\uFFFD")
	return l
}

// readLog sends the last req.Tail lines of the log file at path and, with
// req.Follow, every line written after them, until ctx ends or gone
// reports the sandbox deleted (what was written by then is sent). A
// file that shrinks (compacted or truncated) is read on from its new end.
// A missing file is an empty log.
func readLog(ctx context.Context, path string, req sandbox.LogRequest, gone func() bool, onLine func(sandbox.LogLine) error) error {
	keep := logFilter(req.Source)
	offset, err := sendTail(path, req, keep, onLine)
	if err != nil || !req.Follow {
		return err
	}
	var partial []byte
	t := time.NewTicker(logPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		final := gone()
		if offset, partial, err = readNew(path, offset, partial, req.Source, keep, onLine); err != nil {
			return err
		}
		if final {
			return nil
		}
	}
}

// sendTail sends the last req.Tail complete lines and returns the offset
// just past the last complete line.
func sendTail(path string, req sandbox.LogRequest, keep func(string) bool, onLine func(sandbox.LogLine) error) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	start := max(fi.Size()-sandbox.MaxLogTailBytes, 0)
	buf := make([]byte, fi.Size()-start)
	n, err := f.ReadAt(buf, start)
	if err != nil && err != io.EOF {
		return 0, err
	}
	buf = buf[:n]
	end := bytes.LastIndexByte(buf, '\n') + 1
	body := buf[:end]
	if start > 0 {
		// The first line read is probably the end of a longer one.
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			body = body[i+1:]
		}
	}
	var lines []sandbox.LogLine
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		l := logLine(req.Source, body[:i])
		body = body[i+1:]
		if keep(l.Text) {
			lines = append(lines, l)
		}
	}
	if len(lines) > req.Tail {
		lines = lines[len(lines)-req.Tail:]
	}
	for _, l := range lines {
		if err := onLine(l); err != nil {
			return 0, err
		}
	}
	return start + int64(end), nil
}

// readNew sends the complete lines written since offset; partial holds the
// start of a line not yet ended (at most MaxLogLineBytes are kept).
func readNew(path string, offset int64, partial []byte, src sandbox.LogSource, keep func(string) bool, onLine func(sandbox.LogLine) error) (int64, []byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return offset, partial, nil
	}
	if err != nil {
		return offset, partial, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return offset, partial, err
	}
	if fi.Size() < offset {
		return fi.Size(), nil, nil
	}
	buf := make([]byte, 64<<10)
	for offset < fi.Size() {
		n, err := f.ReadAt(buf, offset)
		offset += int64(n)
		chunk := buf[:n]
		for len(chunk) > 0 {
			i := bytes.IndexByte(chunk, '\n')
			if i < 0 {
				room := sandbox.MaxLogLineBytes + 1 - len(partial)
				partial = append(partial, chunk[:min(len(chunk), max(room, 0))]...)
				break
			}
			line := append(partial, chunk[:min(i, max(sandbox.MaxLogLineBytes+1-len(partial), 0))]...)
			partial = partial[:0]
			chunk = chunk[i+1:]
			if l := logLine(src, line); keep(l.Text) {
				if err := onLine(l); err != nil {
					return offset, nil, err
				}
			}
		}
		if err == io.EOF || n == 0 {
			break
		}
		if err != nil {
			return offset, partial, err
		}
	}
	return offset, partial, nil
}
