package block_test

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/ratelog"
	"github.com/cellvm/cellvm/virtio/block"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

const diskSectors = 64

func disk(t *testing.T, readOnly bool) (*block.Block, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "disk.img")
	data := make([]byte, diskSectors*block.SectorSize+100) // trailing partial sector is not addressable
	for i := range data {
		data[i] = byte(i / block.SectorSize)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	flag := os.O_RDWR
	if readOnly {
		flag = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := block.New(f, readOnly, "cellvm-root-0123456789abcdef", nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, path
}

func header(typ uint32, sector uint64) []byte {
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint64(h[8:], sector)
	return h
}

func status(t *testing.T, u virtiotest.Used) byte {
	t.Helper()
	if len(u.Data) == 0 {
		t.Fatalf("no status written (used len %d)", u.Len)
	}
	return u.Data[len(u.Data)-1]
}

func TestConfigAndFeatures(t *testing.T) {
	b, _ := disk(t, true)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	if got := binary.LittleEndian.Uint64(h.Config(0, 8)); got != diskSectors {
		t.Fatalf("capacity %d, want %d", got, diskSectors)
	}
	if got := binary.LittleEndian.Uint32(h.Config(20, 4)); got != 512 {
		t.Fatalf("blk_size %d", got)
	}
	f := h.Features
	if f&block.FeatureRO == 0 || f&block.FeatureFlush == 0 || f&block.FeatureSegMax == 0 {
		t.Fatalf("features %#x", f)
	}
}

func TestRead(t *testing.T) {
	b, _ := disk(t, false)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	head := h.Post(0, virtiotest.R(header(block.TypeIn, 3)), virtiotest.W(700), virtiotest.W(324), virtiotest.W(1))
	u := h.Wait(0, 5*time.Second)
	if u.ID != head || u.Len != 1025 || status(t, u) != block.StatusOK {
		t.Fatalf("used %d len %d status %d", u.ID, u.Len, status(t, u))
	}
	want := append(bytes.Repeat([]byte{3}, 512), bytes.Repeat([]byte{4}, 512)...)
	if !bytes.Equal(u.Data[:1024], want) {
		t.Fatal("read data does not match the file")
	}
}

func TestWriteAndFlush(t *testing.T) {
	b, path := disk(t, false)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	data := bytes.Repeat([]byte{0xab}, 1024)
	// Header split over two buffers, data over two, through an indirect table.
	hdr := header(block.TypeOut, 5)
	h.Queues[0].PostIndirect(virtiotest.R(hdr[:10]), virtiotest.R(append(hdr[10:], data[:100]...)), virtiotest.R(data[100:]), virtiotest.W(1))
	h.Kick(0)
	if u := h.Wait(0, 5*time.Second); status(t, u) != block.StatusOK || u.Len != 1 {
		t.Fatalf("write status %d len %d", status(t, u), u.Len)
	}
	h.Post(0, virtiotest.R(header(block.TypeFlush, 0)), virtiotest.W(1))
	if u := h.Wait(0, 5*time.Second); status(t, u) != block.StatusOK {
		t.Fatalf("flush status %d", status(t, u))
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[5*512:7*512], data) || got[5*512-1] != 4 || got[7*512] != 7 {
		t.Fatal("file contents after write are wrong")
	}
}

func TestReadOnlyRejectsWrites(t *testing.T) {
	b, path := disk(t, true)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	h.Post(0, virtiotest.R(header(block.TypeOut, 0)), virtiotest.R(make([]byte, 512)), virtiotest.W(1))
	if u := h.Wait(0, 5*time.Second); status(t, u) != block.StatusIOErr {
		t.Fatalf("write to read-only disk: status %d, want IOERR", status(t, u))
	}
	got, _ := os.ReadFile(path)
	if got[0] != 0 || got[511] != 0 {
		t.Fatal("read-only disk was modified")
	}
	h.Post(0, virtiotest.R(header(block.TypeFlush, 0)), virtiotest.W(1))
	if u := h.Wait(0, 5*time.Second); status(t, u) != block.StatusOK {
		t.Fatalf("flush on read-only disk: status %d", status(t, u))
	}
}

func TestBadRequests(t *testing.T) {
	b, path := disk(t, false)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	for _, c := range []struct {
		name string
		segs []virtiotest.Seg
		want byte
	}{
		{"read past end", []virtiotest.Seg{virtiotest.R(header(block.TypeIn, diskSectors-1)), virtiotest.W(1024), virtiotest.W(1)}, block.StatusIOErr},
		{"read at end", []virtiotest.Seg{virtiotest.R(header(block.TypeIn, diskSectors)), virtiotest.W(512), virtiotest.W(1)}, block.StatusIOErr},
		{"sector overflows", []virtiotest.Seg{virtiotest.R(header(block.TypeIn, 1<<63)), virtiotest.W(512), virtiotest.W(1)}, block.StatusIOErr},
		{"write past end", []virtiotest.Seg{virtiotest.R(header(block.TypeOut, diskSectors)), virtiotest.R(make([]byte, 512)), virtiotest.W(1)}, block.StatusIOErr},
		{"partial sector", []virtiotest.Seg{virtiotest.R(header(block.TypeIn, 0)), virtiotest.W(100), virtiotest.W(1)}, block.StatusIOErr},
		{"unknown type", []virtiotest.Seg{virtiotest.R(header(99, 0)), virtiotest.W(1)}, block.StatusUnsupp},
		{"get id too small", []virtiotest.Seg{virtiotest.R(header(block.TypeGetID, 0)), virtiotest.W(10), virtiotest.W(1)}, block.StatusIOErr},
		{"last sector ok", []virtiotest.Seg{virtiotest.R(header(block.TypeIn, diskSectors-1)), virtiotest.W(512), virtiotest.W(1)}, block.StatusOK},
	} {
		h.Post(0, c.segs...)
		if u := h.Wait(0, 5*time.Second); status(t, u) != c.want {
			t.Errorf("%s: status %d, want %d", c.name, status(t, u), c.want)
		}
	}
	// A chain with no room for a status completes empty and the device
	// carries on.
	h.Post(0, virtiotest.R(header(block.TypeIn, 0)))
	if u := h.Wait(0, 5*time.Second); u.Len != 0 {
		t.Fatalf("short chain: used len %d", u.Len)
	}
	if h.NeedsReset() {
		t.Fatal("bad requests broke the device")
	}
	st, _ := os.Stat(path)
	if st.Size() != diskSectors*512+100 {
		t.Fatalf("file size changed to %d", st.Size())
	}
}

func TestGetID(t *testing.T) {
	b, _ := disk(t, true)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	h.Post(0, virtiotest.R(header(block.TypeGetID, 0)), virtiotest.W(20), virtiotest.W(1))
	u := h.Wait(0, 5*time.Second)
	if status(t, u) != block.StatusOK || string(u.Data[:20]) != "cellvm-root-01234567" {
		t.Fatalf("GET_ID: status %d id %q", status(t, u), u.Data[:20])
	}
}

func TestManyRequests(t *testing.T) {
	b, _ := disk(t, false)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	for round := range 10 {
		for i := range 20 {
			h.Queues[0].Post(virtiotest.R(header(block.TypeIn, uint64(i))), virtiotest.W(512), virtiotest.W(1))
		}
		h.Kick(0)
		for range 20 {
			u := h.Wait(0, 5*time.Second)
			if status(t, u) != block.StatusOK {
				t.Fatalf("round %d: status %d", round, status(t, u))
			}
		}
	}
}

// TestBadRequestFloodLogsBoundedLines: a guest posting 10,000 malformed
// requests gets a bounded number of log lines, and the lines that were
// dropped are counted in the log, not lost without a trace.
func TestBadRequestFloodLogsBoundedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(path, make([]byte, diskSectors*block.SectorSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	// Read only after Close, which waits for the device's goroutine.
	var logs bytes.Buffer
	b, err := block.New(f, true, "flood", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	const flood = 10000
	start := time.Now()
	for i := 0; i < flood; i++ {
		// A header and no status byte: nowhere to report, so the device
		// completes it empty and logs "bad request".
		h.Post(0, virtiotest.R(header(block.TypeIn, 0)))
		h.Wait(0, 5*time.Second)
	}
	elapsed := time.Since(start)
	if err := h.MMIO.Close(); err != nil { // flushes the pending count
		t.Fatal(err)
	}
	var logged, dropped int
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(l, "bad request") {
			continue
		}
		if m := regexp.MustCompile(`dropped=(\d+)`).FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			dropped += n
		}
		if strings.Contains(l, "msg=\"bad request\"") {
			logged++
		}
	}
	// The limit lets a burst through, then one line a second.
	limit := ratelog.DefaultBurst + int(elapsed/ratelog.DefaultEvery) + 1
	if logged > limit {
		t.Errorf("%d 'bad request' lines for %d bad requests in %v, want at most %d", logged, flood, elapsed, limit)
	}
	if logged+dropped != flood {
		t.Errorf("%d lines logged + %d counted as dropped = %d, want all %d bad requests accounted for:\n%s",
			logged, dropped, logged+dropped, flood, logs.String())
	}
}
