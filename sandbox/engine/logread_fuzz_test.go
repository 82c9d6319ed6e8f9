package engine

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cellvm/cellvm/sandbox"
)

// FuzzReadLog: whatever a guest writes to its console, reading it back
// never panics, every line is valid UTF-8 and at most MaxLogLineBytes, no
// line holds a newline, and reading the file at once or in two appends
// gives the same complete lines.
func FuzzReadLog(f *testing.F) {
	f.Add([]byte("[    0.1] kernel\ntime=T level=INFO msg=up\n"), 5, uint8(3))
	f.Add([]byte(strings.Repeat("x", sandbox.MaxLogLineBytes+3)+"\n\xff\xfe\n\r\n"), 1, uint8(0))
	f.Add([]byte("no newline at all"), 0, uint8(200))
	f.Fuzz(func(t *testing.T, data []byte, tail int, split uint8) {
		if tail < 0 || tail > sandbox.MaxLogTail {
			tail = 10
		}
		dir := t.TempDir()
		p := filepath.Join(dir, "console.log")
		os.WriteFile(p, data, 0o600)
		check := func(l sandbox.LogLine) error {
			if !utf8.ValidString(l.Text) || len(l.Text) > sandbox.MaxLogLineBytes*3 || strings.Contains(l.Text, "\n") || l.Cut < 0 {
				t.Fatalf("bad line %q (cut %d)", l.Text, l.Cut)
			}
			return nil
		}
		for _, src := range []sandbox.LogSource{sandbox.LogConsole, sandbox.LogAgent} {
			if err := readLog(context.Background(), p, sandbox.LogRequest{Source: src, Tail: tail}, func() bool { return true }, check); err != nil {
				t.Fatal(err)
			}
		}
		// Whole versus in two appends, read by the follower's reader.
		var whole, parts []string
		collect := func(dst *[]string) func(sandbox.LogLine) error {
			return func(l sandbox.LogLine) error { check(l); *dst = append(*dst, l.Text); return nil }
		}
		q := filepath.Join(dir, "follow.log")
		os.WriteFile(q, data, 0o600)
		readNew(q, 0, nil, sandbox.LogConsole, logFilter(sandbox.LogConsole), collect(&whole))
		cut := int(split) % (len(data) + 1)
		os.WriteFile(q, data[:cut], 0o600)
		off, partial, _ := readNew(q, 0, nil, sandbox.LogConsole, logFilter(sandbox.LogConsole), collect(&parts))
		fh, _ := os.OpenFile(q, os.O_APPEND|os.O_WRONLY, 0)
		fh.Write(data[cut:])
		fh.Close()
		readNew(q, off, partial, sandbox.LogConsole, logFilter(sandbox.LogConsole), collect(&parts))
		if !bytes.Contains(data, []byte{'\n'}) && len(whole) != 0 {
			t.Fatalf("lines without a newline: %q", whole)
		}
		if strings.Join(whole, "\n") != strings.Join(parts, "\n") {
			t.Fatalf("whole %q, in parts %q", whole, parts)
		}
	})
}
