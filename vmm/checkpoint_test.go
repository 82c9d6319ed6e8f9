package vmm

import (
	"errors"
	"reflect"
	"testing"

	"github.com/cellvm/cellvm/guestmem"
)

// The dirty pages a checkpoint takes stay pending until one is written:
// a failed checkpoint (here, KVM's log of the second slot fails) loses
// none of the pages it took from the devices' log or KVM's, and the next
// take adds its own to them; a written checkpoint starts afresh.
func TestCheckpointPendingPages(t *testing.T) {
	mem, err := guestmem.FromRegions(guestmem.Region{GuestAddr: 0, Data: make([]byte, twoRegions[0].Size)},
		guestmem.Region{GuestAddr: twoRegions[1].GuestAddr, Data: make([]byte, twoRegions[1].Size)})
	if err != nil {
		t.Fatal(err)
	}
	mem.EnableDirtyLog()
	kvmBits := [][]uint64{{1 << 3, 0}, {1 << 9}}
	failSlot := 1
	kvmLog := func(i int, bm []uint64) error {
		if i == failSlot {
			return errors.New("KVM_GET_DIRTY_LOG: EIO")
		}
		copy(bm, kvmBits[i])
		kvmBits[i] = make([]uint64, len(kvmBits[i])) // get-and-clear
		return nil
	}
	var c checkpointing
	mem.MarkDirty(5*pageSize, 1)                         // a device wrote region 0's page 5
	mem.MarkDirty(twoRegions[1].GuestAddr+2*pageSize, 1) // and region 1's page 2
	if err := c.take(twoRegions, mem.TakeDirtyLog, kvmLog); err == nil {
		t.Fatal("a failing KVM log was not an error")
	}
	failSlot = -1
	mem.MarkDirty(7*pageSize, 1)
	if err := c.take(twoRegions, mem.TakeDirtyLog, kvmLog); err != nil {
		t.Fatal(err)
	}
	want := [][]uint64{{1<<3 | 1<<5 | 1<<7, 0}, {1<<2 | 1<<9}}
	if !reflect.DeepEqual(c.pending, want) {
		t.Fatalf("pending %x, want %x", c.pending, want)
	}
	if got := dirtyExtents(c.pending, twoRegions); len(got) != 5 {
		t.Errorf("extents %v, want 5", got)
	}
	c.written()
	if err := c.take(twoRegions, mem.TakeDirtyLog, kvmLog); err != nil {
		t.Fatal(err)
	}
	if got := dirtyExtents(c.pending, twoRegions); len(got) != 0 || c.taken != 1 {
		t.Errorf("after a written checkpoint: extents %v, taken %d; want none and 1", got, c.taken)
	}
}
