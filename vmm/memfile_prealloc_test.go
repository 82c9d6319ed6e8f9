package vmm

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestmem"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// TestMemoryFilePreallocated: a memory file handed over already allocated
// at the memory's size (the daemon's, on a tmpfs) full of stale bytes is
// written in place: the guest's pages come back, every zero page reads
// zero, and the zero runs are punched out, so the file takes no more than
// a fresh one would.
func TestMemoryFilePreallocated(t *testing.T) {
	const mib = 16
	layout := snapshot.MemoryLayout(mib)
	mem := guestmem.New(mib << 20)
	for _, off := range []uint64{0, 7 * pageSize, 5 << 20} {
		if err := mem.WriteAt([]byte{0x5c}, off); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.CreateTemp(tmpfsDir(t), "mem")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{0xee}, mib<<20)); err != nil { // allocated, stale
		t.Fatal(err)
	}
	stats, err := writeMemory(f, mem, layout, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum, _, err := snapshot.SumFile(f); err != nil || sum != stats.Sum {
		t.Fatalf("the save summed %08x, the file sums to %08x (%v)", stats.Sum, sum, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > 1<<20 {
		t.Errorf("the preallocated memory file still takes %d KiB: its zero runs were not punched", used>>10)
	}
	// Reading a tmpfs file's holes through a mapping allocates them: map
	// it after the check.
	got, unmap, err := mapMemoryFile(f, layout)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap()
	if !bytes.Equal(got.List()[0].Data, mem.List()[0].Data) {
		t.Fatal("the memory file written in place differs from the memory: stale bytes or a lost page")
	}
}

// tmpfsDir is /dev/shm when it is a tmpfs (where a punched hole frees its
// pages, as on a state directory in RAM), else a test directory.
func tmpfsDir(t *testing.T) string {
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC {
		return "/dev/shm"
	}
	return t.TempDir()
}
