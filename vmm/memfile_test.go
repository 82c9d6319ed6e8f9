package vmm

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// TestMemoryFileRoundTrip writes guest memory with a few touched pages to a
// memory file and maps it back: the contents come back, the untouched
// pages are holes in the file, and a write to the mapping stays private.
func TestMemoryFileRoundTrip(t *testing.T) {
	const mib = 32
	layout := snapshot.MemoryLayout(mib)
	mem := guestmem.New(mib << 20)
	for _, off := range []uint64{0, 5 * pageSize, 5*pageSize + 100, 3 << 20, mib<<20 - 1} {
		if err := mem.WriteAt([]byte{0xc5}, off); err != nil {
			t.Fatal(err)
		}
	}
	// A run of non-zero pages longer than one write.
	if err := mem.WriteAt(bytes.Repeat([]byte{7}, writeRun+3*pageSize), 8<<20); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mem")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{0xff}, 1<<20)); err != nil { // stale contents
		t.Fatal(err)
	}
	stats, err := writeMemory(f, mem, layout, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum, _, err := snapshot.SumFile(f); err != nil || sum != stats.Sum {
		t.Fatalf("the save summed its memory file to %08x, the file sums to %08x (%v)", stats.Sum, sum, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != mib<<20 {
		t.Fatalf("memory file of %d bytes, want %d", st.Size, mib<<20)
	}
	// Five touched pages and the 2 MiB run: far less than the 32 MiB.
	if used := st.Blocks * 512; used > 4<<20 {
		t.Errorf("memory file uses %d bytes on disk: zero pages were written", used)
	}

	got, unmap, err := mapMemoryFile(f, layout)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	if !bytes.Equal(got.List()[0].Data, mem.List()[0].Data) {
		t.Fatal("the mapped memory file differs from the memory written")
	}
	if err := got.WriteAt([]byte("private"), 0); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 7)
	if _, err := f.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if string(head) == "private" {
		t.Fatal("a write to the restored guest's memory reached the memory file")
	}
}

func TestMemoryFileRefusesWrongSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := mapMemoryFile(f, snapshot.MemoryLayout(32)); err == nil {
		t.Fatal("a 1 MiB memory file was mapped as 32 MiB of guest memory")
	}
}
