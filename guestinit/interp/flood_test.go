package interp

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// vmKB reads a field (VmRSS, VmHWM) of /proc/self/status in KiB.
func vmKB(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if k, v, ok := strings.Cut(string(line), ":"); ok && k == field {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("%s not in /proc/self/status", field)
	return 0
}

func TestOutputFloodIsClipped(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the 200 MiB output flood in -short mode")
	}
	const head, tail = 64 << 10, 32 << 10
	in := newTestInterp(t, func(c *Config) { c.HeadBytes, c.TailBytes = head, tail })
	expectOK(t, run(t, in, "1")) // start the interpreter before measuring
	// Reset the peak RSS (VmHWM) to the current RSS.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset peak RSS: %v", err)
	}
	before := vmKB(t, "VmRSS")
	const lines = 200 << 10 // 200 Ki lines of 1 KiB: 200 MiB
	code := `import sys
w = sys.stdout.write
line = 'x' * 1023 + '\n'
w('START\n')
for i in range(` + strconv.Itoa(lines) + `):
    w(line)
sys.stderr.write('e' * (3 << 20))
w('END\n')`
	var streamed int
	start := time.Now()
	res, err := in.Run(t.Context(), code, 2*time.Minute, func(e cell.Event) {
		if e.Type == cell.EventStdout {
			streamed += len(e.Text)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	expectOK(t, res)
	total := int64(len("START\n") + lines*1024 + len("END\n"))
	if want := total - head - tail; res.Truncated.StdoutBytes != want {
		t.Errorf("stdout_bytes cut = %d, want %d", res.Truncated.StdoutBytes, want)
	}
	if want := int64(3<<20 - head - tail); res.Truncated.StderrBytes != want {
		t.Errorf("stderr_bytes cut = %d, want %d", res.Truncated.StderrBytes, want)
	}
	if !strings.HasPrefix(res.Stdout, "START\nxxx") || !strings.HasSuffix(res.Stdout, "x\nEND\n") ||
		!strings.Contains(res.Stdout, cell.CutMarker(res.Truncated.StdoutBytes)) {
		t.Errorf("stdout does not hold head, marker and tail (%d bytes)", len(res.Stdout))
	}
	if streamed != head {
		t.Errorf("streamed %d stdout bytes, want the %d-byte head", streamed, head)
	}
	peak := vmKB(t, "VmHWM")
	t.Logf("flood of %d MiB in %v; RSS before %d KiB, peak %d KiB", total>>20, elapsed, before, peak)
	if grew := peak - before; grew > 64<<10 {
		t.Errorf("peak RSS grew by %d KiB during the flood", grew)
	}
}
