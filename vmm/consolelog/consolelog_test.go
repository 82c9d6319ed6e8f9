package consolelog

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

func open(t *testing.T, flag int) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "console.log"), os.O_CREATE|flag, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// pattern returns the bytes at offsets [off, off+n) of an endless stream
// whose every byte depends on its offset, so a misplaced byte shows.
func pattern(off int64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		x := off + int64(i)
		b[i] = byte(x ^ x>>8 ^ x>>16)
	}
	return b
}

var markerRE = regexp.MustCompile(`^\[cellvm: console log capped at (\d+) bytes; (\d+) earlier bytes dropped\]\n`)

// TestFloodStaysUnderCapAndKeepsTheNewest writes 64 MiB, in writes of many
// sizes (a guest prints byte by byte through the UART; larger writes test
// the edges), to a log capped at 1 MiB: the file never passes the cap, and
// at the end it holds a marker with the exact count of dropped bytes
// followed by the newest output, byte for byte.
func TestFloodStaysUnderCapAndKeepsTheNewest(t *testing.T) {
	const max = 1 << 20
	f := open(t, os.O_RDWR)
	c, err := New(f, max)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{1, 1, 1, 7, 4096, 100_000, 1, 3 << 20, 65536, 513}
	var off int64
	for i := 0; off < 64<<20; i++ {
		n := sizes[i%len(sizes)]
		if k, err := c.Write(pattern(off, n)); err != nil || k != n {
			t.Fatalf("write %d bytes at %d: %d, %v", n, off, k, err)
		}
		off += int64(n)
		if i%50 == 0 {
			if st, _ := f.Stat(); st.Size() > max {
				t.Fatalf("console log is %d bytes after %d written, above its cap of %d", st.Size(), off, max)
			}
		}
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > max {
		t.Fatalf("console log is %d bytes, above its cap of %d", len(got), max)
	}
	m := markerRE.FindSubmatch(got)
	if m == nil {
		t.Fatalf("a compacted log does not start with the marker: %q", got[:min(len(got), 120)])
	}
	if capped, _ := strconv.Atoi(string(m[1])); capped != max {
		t.Errorf("marker names cap %d, want %d", capped, max)
	}
	rest := got[len(m[0]):]
	dropped, _ := strconv.ParseInt(string(m[2]), 10, 64)
	if dropped+int64(len(rest)) != off || c.Dropped() != dropped {
		t.Errorf("marker says %d dropped (File says %d) and %d are kept: %d in all, want the %d written",
			dropped, c.Dropped(), len(rest), dropped+int64(len(rest)), off)
	}
	if !bytes.Equal(rest, pattern(off-int64(len(rest)), len(rest))) {
		t.Error("the kept bytes are not the newest output in order")
	}
	if len(rest) < max/2-200 {
		t.Errorf("only %d bytes kept under a cap of %d, want about half", len(rest), max)
	}
}

func TestUnderTheCapNothingChanges(t *testing.T) {
	f := open(t, os.O_RDWR)
	c, err := New(f, MinMax)
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	for i := 0; i < 100; i++ {
		line := fmt.Sprintf("[    %d.000] line %d\n", i, i)
		c.Write([]byte(line))
		want.WriteString(line)
	}
	if got, _ := os.ReadFile(f.Name()); !bytes.Equal(got, want.Bytes()) || c.Dropped() != 0 {
		t.Fatalf("log under its cap changed: %q (dropped %d)", got, c.Dropped())
	}
}

func TestExistingLogOverTheCapIsCompactedAtOnce(t *testing.T) {
	f := open(t, os.O_RDWR)
	f.Write(pattern(0, 3*MinMax))
	if _, err := New(f, MinMax); err != nil {
		t.Fatal(err)
	}
	if st, _ := f.Stat(); st.Size() > MinMax {
		t.Fatalf("a log already over its cap is %d bytes after New, want at most %d", st.Size(), MinMax)
	}
}

func TestRefusesFilesItCannotCompact(t *testing.T) {
	for name, flag := range map[string]int{"write-only": os.O_WRONLY, "append": os.O_RDWR | os.O_APPEND, "read-only": os.O_RDONLY} {
		if _, err := New(open(t, flag), MinMax); err == nil {
			t.Errorf("%s file accepted", name)
		}
	}
	if _, err := New(open(t, os.O_RDWR), MinMax-1); err == nil {
		t.Error("a cap below MinMax accepted")
	}
}
