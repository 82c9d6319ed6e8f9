package vmm

import (
	"fmt"
	"os"
	"strings"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio/block"
	vnet "github.com/cellvm/cellvm/virtio/net"
	"github.com/cellvm/cellvm/virtio/rng"
	"github.com/cellvm/cellvm/virtio/vsock"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// restoreSource is where a restored machine comes from.
type restoreSource struct {
	state *snapshot.State
	mem   *os.File
	// layers are the files under mem when the snapshot's memory is a
	// chain, base first.
	layers []*os.File
	// memSum is mem's sum from the state file's header; hasSum false
	// when it has none.
	memSum uint32
	hasSum bool
}

// tscTolerancePPM is how far the host's TSC frequency may be from the
// snapshot's before the restored vCPUs' TSC is scaled (QEMU's and
// Firecracker's 250 parts per million: frequencies differ that much
// between calibrations of one host).
const tscTolerancePPM = 250

// Restore builds, in this process, the machine a snapshot saved (Save): a
// new VM whose guest RAM maps the memory file private and copy-on-write (pages are
// read when the guest touches them, and VMs restored from one file share
// the pages none of them wrote), with the vCPUs, interrupt controllers,
// PIT, clock and devices of the state file. Run then carries the guest on
// from where it was saved. Restore reads state and maps memory; the caller
// closes both when Restore returns (the mapping keeps what it needs).
//
// A snapshot whose memory is a chain (SaveLayer) also needs layers, the
// files under mem in the order its state file names them, base first;
// their count and sizes are checked, and a save of the restored machine
// reads its untouched pages from them.
//
// cfg gives the restored machine its own devices, which must have the
// snapshot's shape: the same disks (the same sizes; their contents as at
// the save), vsock and network, in the same order. Its vsock CID and
// socket, TAP and disk files may be new: a fork is a machine of its own.
// cfg.VCPUs and cfg.MemoryMiB are the snapshot's when 0, and must be the
// snapshot's otherwise; the kernel, initrd and command line are not used.
func Restore(cfg Config, state, mem *os.File, layers ...*os.File) (*Machine, error) {
	st, err := snapshot.Decode(state)
	if err != nil {
		return nil, fmt.Errorf("restore: state file %s: %w", state.Name(), err)
	}
	if v := snapshot.VMMVersion(); st.VMMVersion != v && cfg.Log != nil {
		cfg.Log.Info("restoring a snapshot taken by another build", "snapshot_vmm", st.VMMVersion, "this_vmm", v)
	}
	if cfg.VCPUs != 0 && cfg.VCPUs != st.Machine.VCPUs {
		return nil, fmt.Errorf("restore: the snapshot's machine has %d vCPUs, not %d", st.Machine.VCPUs, cfg.VCPUs)
	}
	if cfg.MemoryMiB != 0 && cfg.MemoryMiB != st.Machine.MemoryMiB {
		return nil, fmt.Errorf("restore: the snapshot's machine has %d MiB of memory, not %d", st.Machine.MemoryMiB, cfg.MemoryMiB)
	}
	if err := checkChainFiles(st, mem, layers); err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	from := &restoreSource{state: st, mem: mem, layers: layers}
	if sum, err := snapshot.MemorySum(state); err == nil {
		from.memSum, from.hasSum = sum, true
	}
	cfg.VCPUs, cfg.MemoryMiB = st.Machine.VCPUs, st.Machine.MemoryMiB
	m, err := build(cfg, from)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	if err := m.restoreState(st); err != nil {
		m.Close()
		return nil, fmt.Errorf("restore: %w", err)
	}
	// Before any vCPU runs (Run starts them): a hint, never fatal.
	m.prefetch(cfg.Prefetch)
	return m, nil
}

// restoreState puts the new machine in state st: vCPUs first, then the VM's
// PIT, clock and interrupt controllers, then the devices' structs (they
// may raise interrupts once they run, so the interrupt controllers must be
// in place; enterGuest starts them).
func (m *Machine) restoreState(st *snapshot.State) error {
	if err := m.matchDevices(st.Devices); err != nil {
		return err
	}
	if _, err := m.disablePMU(); err != nil {
		return err
	}
	for i := range st.Machine.VCPUs {
		c, err := m.vm.CreateVCPU(i)
		if err != nil {
			return err
		}
		m.addVCPU(c)
	}
	if err := m.matchTSC(st.VM.TSCKHz); err != nil {
		return err
	}
	for i, c := range m.vcpuList() {
		if err := m.restoreVCPU(c, &st.VCPUs[i]); err != nil {
			return fmt.Errorf("vcpu %d: %w", i, err)
		}
	}
	if err := m.vm.SetPIT2(st.VM.PIT); err != nil {
		return err
	}
	// The guest's clock goes on from the save, not from the host's time:
	// the guest steps its wall clock itself (cellvm's init does), and its
	// monotonic clock does not leap by however long the snapshot waited.
	if err := m.vm.SetClock(kvm.ClockData{Clock: st.VM.Clock.Clock}); err != nil {
		return err
	}
	for _, c := range st.VM.IRQChips {
		chip := kvm.IRQChip{ChipID: c.ChipID}
		copy(chip.Chip[:], c.Data)
		if err := m.vm.SetIRQChip(chip); err != nil {
			return err
		}
	}
	if err := m.uart.Restore(st.UART); err != nil {
		return err
	}
	m.marker.elapsed.Store(st.BootMarker.ElapsedNS)
	for i, d := range m.snap.devices {
		if err := restoreDevice(d, &st.Devices[i]); err != nil {
			return fmt.Errorf("virtio device %d (%s at %#x): %w", i, st.Devices[i].Kind, d.base, err)
		}
	}
	return m.restoredFrom(st)
}

// restoredFrom is the restore move: the built machine now holds st's
// state, and Run carries the guest on from it.
func (m *Machine) restoredFrom(st *snapshot.State) error {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	if _, err := m.moveLocked(evRestore); err != nil {
		return err
	}
	m.life.restored = st
	return nil
}

// matchDevices checks that this machine's devices are the snapshot's,
// where the guest expects them.
func (m *Machine) matchDevices(saved []snapshot.Device) error {
	ok := len(saved) == len(m.snap.devices)
	for i := 0; ok && i < len(saved); i++ {
		d := m.snap.devices[i]
		ok = saved[i].Kind == deviceKind(d.dev) && saved[i].MMIOBase == d.base && saved[i].IRQ == d.gsi
	}
	if ok {
		return nil
	}
	var have, want []string
	for _, d := range m.snap.devices {
		have = append(have, string(deviceKind(d.dev)))
	}
	for _, d := range saved {
		want = append(want, string(d.Kind))
	}
	return fmt.Errorf("the snapshot's machine has devices [%s], this configuration makes [%s]: give it the snapshot's disks, vsock and network",
		strings.Join(want, " "), strings.Join(have, " "))
}

// matchTSC scales the new vCPUs' TSC to the snapshot's frequency when this
// host's differs by more than the tolerance: the guest calibrated its
// clocks on the old one.
func (m *Machine) matchTSC(saved uint32) error {
	if saved == 0 {
		return nil
	}
	vcpus := m.vcpuList()
	now, err := vcpus[0].TSCKHz()
	if err != nil {
		return nil // no KVM_GET_TSC_KHZ: nothing to compare
	}
	diff := int64(now) - int64(saved)
	if diff < 0 {
		diff = -diff
	}
	if diff*1_000_000 <= int64(saved)*tscTolerancePPM {
		return nil
	}
	for _, c := range vcpus {
		if err := c.SetTSCKHz(saved); err != nil {
			return fmt.Errorf("the snapshot's TSC ran at %d kHz, this host's at %d, and KVM cannot scale it: %w", saved, now, err)
		}
	}
	m.log.Info("restored vCPUs' TSC scaled to the snapshot's", "snapshot_khz", saved, "host_khz", now)
	return nil
}

// restoreDevice restores one virtio device: its own state, then its
// transport's registers. Neither reads guest memory; the transport's Start
// (enterGuest, after the jail) does.
func restoreDevice(d *virtioSlot, ds *snapshot.Device) error {
	var err error
	switch dev := d.dev.(type) {
	case *rng.RNG:
		err = dev.Restore(*ds.RNG)
	case *block.Block:
		err = dev.Restore(*ds.Block)
	case *vsock.Vsock:
		err = dev.Restore(*ds.Vsock)
	case *vnet.Net:
		err = dev.Restore(*ds.Net)
	}
	if err != nil {
		return err
	}
	return d.t.Restore(ds.Transport)
}
