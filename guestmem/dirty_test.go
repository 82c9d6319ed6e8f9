package guestmem

import (
	"slices"
	"testing"
)

func TestDirtyLog(t *testing.T) {
	m, err := FromRegions(Region{GuestAddr: 0, Data: make([]byte, 8*PageSize)}, Region{GuestAddr: 1 << 20, Data: make([]byte, 70*PageSize)})
	if err != nil {
		t.Fatal(err)
	}
	m.MarkDirty(0, 1) // off: nothing to mark, no panic
	if m.DirtyLogEnabled() || m.TakeDirtyLog(0) != nil {
		t.Fatal("a log that is off answered a take")
	}
	m.EnableDirtyLog()
	m.MarkDirty(PageSize-1, 2)                               // pages 0 and 1
	m.MarkDirty(1<<20+65*PageSize, 1)                        // region 1, page 65
	m.MarkDirty(100*PageSize, PageSize)                      // in no region: nothing
	m.MarkDirty(1<<20+69*PageSize, 1<<62)                    // runs past the region: its last page only
	m.MarkDirty(^uint64(0)-10, 100)                          // wraps: nothing, no panic
	if err := m.WriteAt([]byte{1}, 5*PageSize); err != nil { // WriteAt marks
		t.Fatal(err)
	}
	if got, want := m.TakeDirtyLog(0), []uint64{1<<0 | 1<<1 | 1<<5}; !slices.Equal(got, want) {
		t.Errorf("region 0's log %#x, want %#x", got, want)
	}
	if got, want := m.TakeDirtyLog(1), []uint64{0, 1<<(65-64) | 1<<(69-64)}; !slices.Equal(got, want) {
		t.Errorf("region 1's log %#x, want %#x", got, want)
	}
	if got := m.TakeDirtyLog(0); !slices.Equal(got, []uint64{0}) {
		t.Errorf("a take did not clear the log: %#x", got)
	}
	m.MarkDirty(0, 1)
	m.RestoreDirtyLog(0, []uint64{1 << 7, 1}) // the word past the bitmap is ignored
	if got, want := m.TakeDirtyLog(0), []uint64{1 | 1<<7}; !slices.Equal(got, want) {
		t.Errorf("after a restore %#x, want %#x", got, want)
	}
	if m.TakeDirtyLog(2) != nil || m.TakeDirtyLog(-1) != nil {
		t.Error("a take of no region answered")
	}
}

// TestEnableDirtyLogWhileMarking: a device that marks while the log is
// turned on (a test harness's device already polls its queue) sees no log
// or the whole of it: never a log whose bitmaps are not made yet (that
// was an index out of range in a CI run). Run with -race.
func TestEnableDirtyLogWhileMarking(t *testing.T) {
	for range 200 {
		m, err := FromRegions(Region{GuestAddr: 0, Data: make([]byte, 64*PageSize)}, Region{GuestAddr: 1 << 20, Data: make([]byte, 64*PageSize)})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
					m.MarkDirty(1<<20+5*PageSize, 8)
				}
			}
		}()
		m.EnableDirtyLog()
		m.MarkDirty(1<<20+5*PageSize, 8)
		close(stop)
		<-done
		if bm := m.TakeDirtyLog(1); len(bm) != 1 || bm[0] != 1<<5 {
			t.Fatalf("region 1's log %#x, want page 5 marked", bm)
		}
	}
}
