package block_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/virtio/block"
	"github.com/cellvm/cellvm/virtio/virtiotest"
)

// reopen is block.New over a copy of the disk at path: the disk a snapshot
// keeps and a restored VM runs on.
func reopen(t *testing.T, path string) (*block.Block, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "disk-copy.img")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(cp, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := block.New(f, false, "cellvm-root-0123456789abcdef", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, cp
}

// TestRestoreMidStream snapshots a disk with a request done and two posted
// but not served, and restores it over copies of the memory and the disk:
// the two requests complete on the restored device (the write lands in the
// restored disk, not the original), and the original, resumed, serves its
// own copy of them too.
func TestRestoreMidStream(t *testing.T) {
	b, path := disk(t, false)
	h := virtiotest.Start(t, b, ^uint64(0), 64)
	first := bytes.Repeat([]byte{0xaa}, 512)
	h.Post(0, virtiotest.R(header(block.TypeOut, 1)), virtiotest.R(first), virtiotest.W(1))
	if u := h.Wait(0, 5*time.Second); status(t, u) != block.StatusOK {
		t.Fatalf("first write: status %d", status(t, u))
	}
	if err := h.MMIO.Pause(); err != nil {
		t.Fatal(err)
	}
	second := bytes.Repeat([]byte{0xbb}, 512)
	read := h.Post(0, virtiotest.R(header(block.TypeIn, 1)), virtiotest.W(512), virtiotest.W(1))
	write := h.Post(0, virtiotest.R(header(block.TypeOut, 2)), virtiotest.R(second), virtiotest.W(1))
	st, mem := h.Snapshot()
	saved := b.Save()

	b2, path2 := reopen(t, path)
	if err := b2.Restore(saved); err != nil {
		t.Fatal(err)
	}
	r := h.Restore(b2, st, mem)
	// The two are in flight together and may complete in either order.
	got := map[uint16]virtiotest.Used{}
	for range 2 {
		u := r.Wait(0, 5*time.Second)
		got[u.ID] = u
	}
	if u, ok := got[read]; !ok || status(t, u) != block.StatusOK || !bytes.Equal(u.Data[:512], first) {
		t.Fatalf("read after restore: %v (used %v)", ok, got)
	}
	if u, ok := got[write]; !ok || status(t, u) != block.StatusOK {
		t.Fatalf("write after restore: %v (used %v)", ok, got)
	}
	if u, ok := r.Queues[0].Next(); ok {
		t.Fatalf("a request was served twice: %+v", u)
	}
	got2, _ := os.ReadFile(path2)
	got1, _ := os.ReadFile(path)
	if !bytes.Equal(got2[2*512:3*512], second) {
		t.Fatal("the restored device's write is not in its disk")
	}
	if bytes.Equal(got1[2*512:3*512], second) {
		t.Fatal("the paused original served the write")
	}
	// The original carries on from the same point, on its own disk.
	h.MMIO.Resume()
	h.Wait(0, 5*time.Second)
	h.Wait(0, 5*time.Second)
	if got1, _ := os.ReadFile(path); !bytes.Equal(got1[2*512:3*512], second) {
		t.Fatal("the resumed original did not serve its write")
	}
}

func TestRestoreRefusesAnotherDisk(t *testing.T) {
	b, _ := disk(t, false)
	st := b.Save()
	if st.Sectors != diskSectors || st.ReadOnly || st.ID != "cellvm-root-01234567" {
		t.Fatalf("saved %+v", st)
	}
	if err := b.Restore(st); err != nil {
		t.Fatalf("restore onto the same disk: %v", err)
	}
	for _, bad := range []block.State{
		{Sectors: diskSectors + 1, ID: st.ID},
		{Sectors: diskSectors, ReadOnly: true, ID: st.ID},
		{Sectors: diskSectors, ID: "cellvm-disk-1"},
	} {
		if err := b.Restore(bad); err == nil {
			t.Errorf("restore of %+v onto a %d-sector disk succeeded", bad, diskSectors)
		}
	}
}
