package engine

import (
	"context"
	"time"

	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A snapshot's recorded working set: what templatewset.go does for a
// template, done for a user's snapshot by its forks, at no extra VM. A
// fork of a snapshot that has no record yet records one: after its first
// cell's result, the daemon asks its VMM which pages of the snapshot's
// memory file its guest touched since the restore (control.WorkingSet),
// and writes the answer beside the snapshot (workingSetFile, tied to its
// memory file). Every later fork of the snapshot reads those ranges ahead
// before its first vCPU runs (control.Restore.Prefetch), instead of
// faulting them in a page at a time. The first cell is the fork's user's
// own, so the record is of the work the snapshot's forks do, not of a
// trivial cell.
//
// There is no claim: forks created together before any record exists
// each record, and the last rename wins (each record is whole, and any is
// a fair hint). A fork that ends before its first result records nothing.
// The record is a hint, as a template's is: a failure is logged at Debug
// and changes nothing for the fork, and a record that is damaged, or not
// of the snapshot's memory file, is not used. The VMM's answer is bounded
// and validated before it is written (writeWorkingSet): a VMM taken over
// by its guest can at worst make its snapshot's later forks read ahead
// pages of that snapshot's own memory file that they do not need.

// wsRecordTimeout bounds the VMM's answer and the write.
const wsRecordTimeout = 30 * time.Second

// forkPrefetch is the prefetch of a fork of the snapshot in dir: its
// recorded working set, or, when it has none or a bad one, nil and record
// true (the fork is to record one).
func (m *VMManager) forkPrefetch(dir string) (prefetch []snapshot.Extent, record bool) {
	ws, err := readWorkingSet(dir)
	if err != nil {
		m.log.Debug("snapshot's recorded working set not used", "dir", dir, "error", clip(err.Error(), 512))
		return nil, true
	}
	if ws == nil {
		return nil, true
	}
	return ws.Extents, false
}

// recordAfterFirstResult is called after each of s's cell results: the
// first one of a fork that is to record its snapshot's working set starts
// the recording, in the background.
func (m *VMManager) recordAfterFirstResult(s *vmSandbox) {
	dir := s.recordWorkingSet.Swap(nil)
	if dir == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wsRecordTimeout)
		defer cancel()
		start := time.Now()
		ext, err := control.WorkingSet(ctx, hostControlPath(s.dir))
		if err == nil {
			var ws *snapshot.WorkingSet
			if ws, err = writeWorkingSet(*dir, ext); err == nil {
				m.log.Info("snapshot's working set recorded by its fork", "sandbox", s.id, "extents", len(ws.Extents),
					"bytes", ws.Bytes(), "took_ms", time.Since(start).Milliseconds())
				return
			}
		}
		m.log.Debug("a fork could not record its snapshot's working set", "sandbox", s.id, "error", clip(err.Error(), 512))
	}()
}
