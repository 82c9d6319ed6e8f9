package vmm

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio/vsock"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Checkpoints (issue 29): a running machine's memory and state, written
// while it runs on, cheaply enough to take one after every cell. A
// machine with Config.Checkpoints logs the pages written into its memory
// from its boot or restore on: the guest's, in KVM's dirty log on every
// memory slot, and its devices', in guestmem's (a used ring, a block
// read, a received packet never pass through KVM). A checkpoint pauses
// the machine, takes both logs and writes:
//
//   - the first of a booted machine, or one asked Full: a whole image,
//     as Save writes one;
//   - the first of a restored machine: a layer of the pages written since
//     the restore (the page map's, as SaveLayer finds them, and the logs'),
//     over the files it was restored from;
//   - any later one: a layer of the pages written since the checkpoint
//     before, over that checkpoint's files.
//
// A layer holds at most snapshot.MaxCheckpointExtents extents: the
// smallest gaps between dirty extents are merged in (a clean page in a
// layer is the page under it). Its state file names its own extents and
// no chain (snapshot.EncodeCheckpoint): the daemon keeps the chain and
// composes it for a restore (snapshot.ComposeCheckpoint).
//
// Unlike Save, a checkpoint does not reset the guest's vsock transport:
// the live guest's connections (its agent's) go on. The state says
// ResetVsock instead, and a restore of it resets the restored guest's
// transport before its vCPUs run (enterGuest): there the host ends of
// its connections are gone.
//
// A checkpoint that fails keeps the dirty pages it took (pending), so
// the next one writes them: no page written is ever left out of a layer.

// checkpointing is a machine's checkpoint state, under snap.op.
type checkpointing struct {
	// taken counts the checkpoints written; the first decides what kind.
	taken int
	// pending are the pages written since the last checkpoint that the
	// logs no longer hold (a checkpoint took them and failed), one
	// bitmap per memory region; nil until the first take.
	pending [][]uint64
}

// ErrNoCheckpoints is returned by Checkpoint for a machine built without
// Config.Checkpoints.
var ErrNoCheckpoints = errors.New("the machine logs no dirty pages (it was started without checkpoints)")

// slotFlags are the flags of the machine's KVM memory slots.
func (m *Machine) slotFlags() uint32 {
	if m.cfg.Checkpoints {
		return kvm.MemLogDirtyPages
	}
	return 0
}

// logDeviceWrites turns the devices' dirty log on for a machine with
// checkpoints, before any device exists.
func (m *Machine) logDeviceWrites() {
	if m.cfg.Checkpoints {
		m.mem.EnableDirtyLog()
	}
}

// TakesCheckpoints says whether the machine was built with checkpoints.
func (m *Machine) TakesCheckpoints() bool { return m.cfg.Checkpoints }

// Checkpoint pauses the running machine, writes a checkpoint of it into
// memFile and stateFile (both emptied first and synced, the state file
// last), and resumes it, whether the checkpoint was written or not. full
// asks for a whole image whatever could be layered. A machine that is
// not running answers ErrNotRunning.
func (m *Machine) Checkpoint(stateFile, memFile *os.File, full bool) (control.CheckpointStats, error) {
	if !m.cfg.Checkpoints {
		return control.CheckpointStats{}, ErrNoCheckpoints
	}
	start := time.Now()
	if err := m.Pause(); err != nil {
		return control.CheckpointStats{}, err
	}
	stats, bytes, err := m.checkpoint(stateFile, memFile, full)
	if rerr := m.Resume(); rerr != nil && err == nil {
		err = rerr
	}
	stats.PauseMS = time.Since(start).Milliseconds()
	if err != nil {
		m.log.Warn("checkpoint failed: its pages go into the next one", "err", err, "pause_ms", stats.PauseMS)
		return control.CheckpointStats{}, fmt.Errorf("checkpoint: %w", err)
	}
	m.log.Info("checkpoint", "n", m.ckpt.taken, "layer", stats.Layer, "pages", stats.Pages, "bytes", bytes, "pause_ms", stats.PauseMS)
	return stats, nil
}

// checkpoint writes the paused machine's checkpoint and says what it
// wrote: its stats (but the pause) and the memory file's bytes.
func (m *Machine) checkpoint(stateFile, memFile *os.File, full bool) (control.CheckpointStats, int64, error) {
	m.snap.op.Lock()
	defer m.snap.op.Unlock()
	if _, err := m.move(evSave); err != nil {
		return control.CheckpointStats{}, 0, fmt.Errorf("%w: %v", ErrNotPaused, err)
	}
	layout := snapshot.MemoryLayout(m.cfg.MemoryMiB)
	if len(m.mem.List()) != len(layout) {
		return control.CheckpointStats{}, 0, fmt.Errorf("%d memory regions, the layout has %d", len(m.mem.List()), len(layout))
	}
	err := m.ckpt.take(layout, m.mem.TakeDirtyLog, func(i int, bm []uint64) error { return m.vm.GetDirtyLog(uint32(i), bm) })
	if err != nil {
		return control.CheckpointStats{}, 0, err
	}
	st, err := m.captureState()
	if err != nil {
		return control.CheckpointStats{}, 0, err
	}
	st.ResetVsock = true
	var stats control.CheckpointStats
	var ws memWriteStats
	if full || (m.ckpt.taken == 0 && m.memSrc == nil) {
		ws, err = writeMemory(memFile, m.mem, layout, m.cfg.Pagemap, m.memSrc, nil)
		stats.Pages = (ws.FromMemory + ws.FromSource) / pageSize
	} else {
		var ext []snapshot.Extent
		if ext, err = m.layerExtents(layout); err == nil {
			st.Machine.Extents = ext
			ws, err = writeLayer(memFile, m.mem, layout, ext)
			stats.Layer, stats.Pages = true, countPages(ext)
		}
	}
	if err != nil {
		return control.CheckpointStats{}, 0, err
	}
	if err := memFile.Sync(); err != nil {
		return control.CheckpointStats{}, 0, fmt.Errorf("sync the memory file: %w", err)
	}
	if err := writeStateFile(stateFile, st, ws.Sum); err != nil {
		return control.CheckpointStats{}, 0, err
	}
	m.ckpt.written()
	return stats, ws.FromMemory + ws.FromSource, nil
}

// take moves the dirty logs into pending, where they stay until a
// checkpoint is written: dev(i), the devices' log of region i (taken and
// cleared), and kvmLog(i, bm), KVM's of slot i. What a failed take took
// stays in pending too.
func (c *checkpointing) take(layout []snapshot.MemoryRegion, dev func(i int) []uint64, kvmLog func(i int, bm []uint64) error) error {
	if c.pending == nil {
		c.pending = newBitmaps(layout)
	}
	for i, l := range layout {
		orBitmaps(c.pending, i, dev(i))
		bm := make([]uint64, kvm.DirtyBitmapWords(l.Size))
		if err := kvmLog(i, bm); err != nil {
			return fmt.Errorf("memory slot %d: %w", i, err)
		}
		orBitmaps(c.pending, i, bm)
	}
	return nil
}

// written says a checkpoint holding every pending page was written.
func (c *checkpointing) written() {
	c.taken++
	c.pending = nil
}

// layerExtents are the extents of a checkpoint layer: the pending pages,
// and for the first checkpoint of a restored machine the pages its page
// map says were written since the restore too, coalesced to at most
// snapshot.MaxCheckpointExtents.
func (m *Machine) layerExtents(layout []snapshot.MemoryRegion) ([]snapshot.Extent, error) {
	bits := m.ckpt.pending
	if m.ckpt.taken == 0 && m.cfg.Pagemap != nil {
		written, err := pageExtents(m.mem, layout, m.cfg.Pagemap, changed, math.MaxInt)
		if err != nil {
			return nil, err
		}
		bits = newBitmaps(layout)
		for i := range bits {
			orBitmaps(bits, i, m.ckpt.pending[i])
		}
		markExtents(bits, layout, written)
	}
	return coalesceExtents(dirtyExtents(bits, layout), layout, snapshot.MaxCheckpointExtents)
}

// writeStateFile writes a checkpoint's state into f, emptied first, and
// syncs it.
func writeStateFile(f *os.File, st *snapshot.State, memSum uint32) error {
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("state file: %w", err)
	}
	if err := snapshot.EncodeCheckpoint(f, st, memSum); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync the state file: %w", err)
	}
	return nil
}

// resetVsockAfterRestore resets the restored guest's vsock transport when
// its state says it was taken live (a checkpoint): the guest still holds
// connections whose host ends were the old VMM's. It runs once the
// devices started and before any vCPU: the device is paused for it, as
// TransportReset needs.
func (m *Machine) resetVsockAfterRestore(st *snapshot.State) {
	if st == nil || !st.ResetVsock {
		return
	}
	for _, d := range m.snap.devices {
		v, ok := d.dev.(*vsock.Vsock)
		if !ok {
			continue
		}
		if err := d.t.Pause(); err != nil {
			m.log.Warn("restore: the guest's vsock connections were not reset; they will fail on their own", "err", err)
			continue
		}
		if err := v.TransportReset(); err != nil {
			m.log.Warn("restore: the guest's vsock connections were not reset; they will fail on their own", "err", err)
		}
		d.t.Resume()
	}
}
