package vmm

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/block"
	vnet "github.com/cellvm/cellvm/virtio/net"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/vsock"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// ErrNotPaused is returned by Save for a machine that is not paused.
var ErrNotPaused = errors.New("the machine is not paused (Pause it first)")

// Save writes a snapshot of the paused machine: its memory to memFile and
// its state to stateFile (both emptied first, both synced before Save
// returns, the state file last, so that a complete state file always has
// its memory). The state file's header carries the memory file's CRC-32C,
// summed as it was written (memfile.go), for a restorer to check the
// memory file against (snapshot.VerifyMemory). The machine stays paused; Resume carries on, or the process
// may end.
//
// The vsock transport is reset first (see virtio/vsock): the guest's
// connections to the host end, and the machine that resumes and every
// machine restored from the snapshot handle the same reset event. The disks'
// contents are not in the snapshot: whoever restores it must give the
// restored machine disks as they are now.
func (m *Machine) Save(stateFile, memFile *os.File) error { return m.save(stateFile, memFile, false) }

// SaveLayer is Save, except that the memory file may be a layer over the
// files the machine was restored from (layers.go): only the pages the
// guest wrote since its restore, and the state file names those files
// under it. The caller says by calling it that those files are its own
// and that it keeps them, unchanged, for as long as the snapshot may be
// restored: never a snapshot's or a template's that others restore from.
// A whole image is written instead where a layer cannot be: a machine
// that was booted, or has no page map, a chain at snapshot.MaxLayers
// files (the save flattens it), or changes in more than
// snapshot.MaxLayerExtents extents.
func (m *Machine) SaveLayer(stateFile, memFile *os.File) error {
	return m.save(stateFile, memFile, true)
}

func (m *Machine) save(stateFile, memFile *os.File, layer bool) error {
	m.snap.op.Lock()
	defer m.snap.op.Unlock()
	if _, err := m.move(evSave); err != nil {
		return fmt.Errorf("%w: %v", ErrNotPaused, err)
	}
	for _, d := range m.snap.devices {
		if v, ok := d.dev.(*vsock.Vsock); ok {
			if err := v.TransportReset(); err != nil {
				m.log.Warn("snapshot: the guest's vsock connections were not reset; they will fail on their own", "err", err)
			}
		}
	}
	st, err := m.captureState()
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	start := time.Now()
	stats, err := m.writeMemoryOrLayer(memFile, &st.Machine, layer)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	wrote := time.Since(start)
	if err := memFile.Sync(); err != nil {
		return fmt.Errorf("snapshot: sync the memory file: %w", err)
	}
	m.log.Info("snapshot memory written", "from_memory_mib", stats.FromMemory>>20, "from_old_file_mib", stats.FromSource>>20,
		"holes_mib", stats.Holes>>20, "page_map", stats.UsedPagemap, "layer_over", len(st.Machine.Layers), "crc32c", fmt.Sprintf("%08x", stats.Sum), "write_ms", wrote.Milliseconds(), "sync_ms", (time.Since(start) - wrote).Milliseconds())
	if err := stateFile.Truncate(0); err != nil {
		return fmt.Errorf("snapshot: state file: %w", err)
	}
	if _, err := stateFile.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot: state file: %w", err)
	}
	if err := snapshot.EncodeWithMemory(stateFile, st, stats.Sum); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := stateFile.Sync(); err != nil {
		return fmt.Errorf("snapshot: sync the state file: %w", err)
	}
	m.log.Info("snapshot saved", "vcpus", len(st.VCPUs), "devices", len(st.Devices), "memory_mib", st.Machine.MemoryMiB)
	return nil
}

// writeMemoryOrLayer writes the machine's memory into f: as a layer over
// the files it was restored from when layer allows it and it can (SaveLayer),
// recording the chain in sm; as a whole image otherwise.
func (m *Machine) writeMemoryOrLayer(f *os.File, sm *snapshot.Machine, layer bool) (memWriteStats, error) {
	if layer {
		why := ""
		switch src := m.memSrc; {
		case src == nil:
			why = "the machine was booted, not restored"
		case src.chain == nil:
			why = "its memory file has no sum to name it by"
		case m.cfg.Pagemap == nil:
			why = "no page map"
		case len(src.chain)+1 > snapshot.MaxLayers:
			why = fmt.Sprintf("its memory is a chain of %d files already: flattened", len(src.chain))
		}
		if why == "" {
			ext, err := layerExtents(m.mem, sm.Memory, m.cfg.Pagemap, snapshot.MaxLayerExtents)
			switch {
			case err == nil:
				stats, err := writeLayer(f, m.mem, sm.Memory, ext)
				if err == nil {
					sm.Layers = append([]snapshot.Layer(nil), m.memSrc.chain...)
					sm.Extents = ext
				}
				return stats, err
			case errors.Is(err, errScattered):
				why = err.Error()
			default:
				return memWriteStats{}, err
			}
		}
		m.log.Info("snapshot memory written whole, not as a layer", "why", why)
	}
	var total int64
	for _, r := range sm.Memory {
		total += int64(r.Size)
	}
	start := time.Now()
	return writeMemory(f, m.mem, sm.Memory, m.cfg.Pagemap, m.memSrc, func(done int64, st memWriteStats) {
		m.log.Info("snapshot memory: in progress", "done_mib", done>>20, "total_mib", total>>20, "from_memory_mib", st.FromMemory>>20,
			"from_old_file_mib", st.FromSource>>20, "holes_mib", st.Holes>>20, "elapsed_ms", time.Since(start).Milliseconds())
	})
}

// captureState reads the paused machine's state: the vCPUs on their own
// threads, then the VM's interrupt controllers, PIT and clock, then the
// legacy and virtio devices.
func (m *Machine) captureState() (*snapshot.State, error) {
	msrs, err := m.msrList()
	if err != nil {
		return nil, err
	}
	n := len(m.vcpuList())
	st := &snapshot.State{
		VMMVersion: snapshot.VMMVersion(),
		Machine:    snapshot.Machine{VCPUs: n, MemoryMiB: m.cfg.MemoryMiB, Memory: snapshot.MemoryLayout(m.cfg.MemoryMiB)},
		VCPUs:      make([]snapshot.VCPU, n),
	}
	err = m.forEachVCPU(func(c *kvm.VCPU) error {
		if c.ID == 0 {
			if khz, err := c.TSCKHz(); err == nil {
				st.VM.TSCKHz = khz
			}
		}
		s, err := m.saveVCPU(c, msrs)
		st.VCPUs[c.ID] = s
		return err
	})
	if err != nil {
		return nil, err
	}
	if st.VM.PIT, err = m.vm.PIT2(); err != nil {
		return nil, err
	}
	for _, id := range []uint32{kvm.IRQChipPICMaster, kvm.IRQChipPICSlave, kvm.IRQChipIOAPIC} {
		c, err := m.vm.IRQChip(id)
		if err != nil {
			return nil, err
		}
		st.VM.IRQChips = append(st.VM.IRQChips, snapshot.IRQChip{ChipID: id, Data: c.Chip[:]})
	}
	if st.VM.Clock, err = m.vm.Clock(); err != nil {
		return nil, err
	}
	st.UART = m.uart.Save()
	st.BootMarker.ElapsedNS = m.marker.elapsed.Load()
	for _, d := range m.snap.devices {
		ds, err := saveDevice(d)
		if err != nil {
			return nil, err
		}
		st.Devices = append(st.Devices, ds)
	}
	return st, nil
}

// saveDevice reads one paused virtio device's state.
func saveDevice(d *virtioSlot) (snapshot.Device, error) {
	ds := snapshot.Device{Kind: deviceKind(d.dev), MMIOBase: d.base, IRQ: d.gsi}
	var err error
	if ds.Transport, err = d.t.Save(); err != nil {
		return ds, err
	}
	switch dev := d.dev.(type) {
	case *rng.RNG:
		s := dev.Save()
		ds.RNG = &s
	case *block.Block:
		s := dev.Save()
		ds.Block = &s
	case *vsock.Vsock:
		s := dev.Save()
		ds.Vsock = &s
	case *vnet.Net:
		s := dev.Save()
		ds.Net = &s
	default:
		return ds, fmt.Errorf("virtio device type %d at %#x cannot be saved", d.dev.DeviceType(), d.base)
	}
	return ds, nil
}

// deviceKind names a device's kind in the state file ("" for a device a
// snapshot cannot hold).
func deviceKind(dev virtio.Device) snapshot.DeviceKind {
	switch dev.(type) {
	case *rng.RNG:
		return snapshot.KindRNG
	case *block.Block:
		return snapshot.KindBlock
	case *vsock.Vsock:
		return snapshot.KindVsock
	case *vnet.Net:
		return snapshot.KindNet
	}
	return ""
}
