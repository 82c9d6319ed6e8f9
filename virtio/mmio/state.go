package mmio

import (
	"errors"
	"fmt"

	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/queue"
)

// State is the transport's part of a snapshot, in the manner of
// Firecracker's Persist: the registers the driver programmed, the
// negotiated features, the interrupt status, and, for an active device,
// where each of its queues stands. The device's own state is its own
// (each device package has a State of its own).
type State struct {
	DeviceType  uint32
	Status      uint32
	DevFeatSel  uint32
	DrvFeatSel  uint32
	DrvFeatures uint64
	QueueSel    uint32
	Queues      []QueueRegs
	Active      bool
	IntStatus   uint32
	NeedsReset  bool
	ConfigGen   uint32
	// Live has, for an active device, one entry per queue: its position,
	// or nil where the driver did not set that queue up.
	Live []*queue.State
}

// QueueRegs is one queue's registers as the driver wrote them.
type QueueRegs struct {
	Num                  uint16
	Ready                bool
	Desc, Driver, Device uint64
}

// ErrNotPausable is returned by Pause for a device that cannot stop and
// carry on (it does not implement virtio.Pauser).
var ErrNotPausable = errors.New("virtio device cannot be paused for a snapshot")

// Pause stops an active device (virtio.Pauser) so that nothing of it
// touches guest memory or its queues until Resume. Pausing an inactive or
// paused device does nothing.
func (m *MMIO) Pause() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.active || m.paused {
		return nil
	}
	p, ok := m.dev.(virtio.Pauser)
	if !ok {
		return fmt.Errorf("%w (type %d)", ErrNotPausable, m.dev.DeviceType())
	}
	p.Pause()
	m.paused = true
	return nil
}

// Resume carries on after Pause and kicks every queue: the driver may have
// posted chains meanwhile, and a restored device must look at the ones
// posted before the snapshot.
func (m *MMIO) Resume() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.paused {
		return
	}
	m.dev.(virtio.Pauser).Resume()
	m.paused = false
	if k := m.kicks.Load(); k != nil {
		for _, c := range *k {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}

// Save returns the transport's state. An active device must be paused.
func (m *MMIO) Save() (State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.active && !m.paused {
		return State{}, errors.New("virtio-mmio: save of a running device (pause it first)")
	}
	if m.restored != nil {
		return State{}, errors.New("virtio-mmio: save of a restored transport not yet started")
	}
	st := State{
		DeviceType: m.dev.DeviceType(), Status: m.status,
		DevFeatSel: m.devFeatSel, DrvFeatSel: m.drvFeatSel, DrvFeatures: m.drvFeatures,
		QueueSel: m.queueSel, Active: m.active, IntStatus: m.intStatus.Load(),
		NeedsReset: m.needsReset.Load(), ConfigGen: m.configGen,
	}
	for _, q := range m.queues {
		st.Queues = append(st.Queues, QueueRegs{Num: q.num, Ready: q.ready, Desc: q.desc, Driver: q.driver, Device: q.device})
	}
	if m.active {
		st.Live = make([]*queue.State, len(m.live))
		for i, q := range m.live {
			if q != nil {
				s := q.Save()
				st.Live[i] = &s
			}
		}
	}
	return st, nil
}

// Restore puts a new transport in the state st, registers only: it reads
// and writes nothing of guest memory, and starts nothing. Start then
// checks the queues against guest memory, activates an active device on
// them and raises a pending interrupt again. The split is Firecracker's
// and Cloud Hypervisor's order: a VMM restores every device into its
// structs while it still holds its privileges (its files are open), drops
// them and installs its seccomp filter, and only then lets a device parse
// a ring the guest controls. The device's own state must have been
// restored before Start. The configuration generation moves on, since the
// device's config may differ from the saved one (a fork's vsock CID). A
// state that does not fit this device is refused, and the transport is
// left as it was.
func (m *MMIO) Restore(st State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.status != 0 || m.active || m.closed || m.restored != nil {
		return errors.New("virtio-mmio: restore into a transport already in use")
	}
	if err := m.checkState(st); err != nil {
		return err
	}
	var live []*queue.State
	if st.Active {
		live = make([]*queue.State, len(st.Live))
		for i, ls := range st.Live {
			if ls == nil {
				continue
			}
			if r := st.Queues[i]; ls.Config.Size != r.Num || ls.Config.DescAddr != r.Desc || ls.Config.DriverAddr != r.Driver || ls.Config.DeviceAddr != r.Device {
				return fmt.Errorf("virtio-mmio: restore: queue %d's position is for another layout than its registers", i)
			}
			if ls.Config.Indirect != (st.DrvFeatures&virtio.FeatureIndirectDesc != 0) || ls.Config.EventIdx != (st.DrvFeatures&virtio.FeatureEventIdx != 0) {
				return fmt.Errorf("virtio-mmio: restore: queue %d's ring features disagree with the negotiated %#x", i, st.DrvFeatures)
			}
			c := *ls
			live[i] = &c
		}
	}
	m.status, m.devFeatSel, m.drvFeatSel, m.drvFeatures, m.queueSel = st.Status, st.DevFeatSel, st.DrvFeatSel, st.DrvFeatures, st.QueueSel
	for i, r := range st.Queues {
		m.queues[i] = queueRegs{num: r.Num, ready: r.Ready, desc: r.Desc, driver: r.Driver, device: r.Device}
	}
	m.configGen = st.ConfigGen + 1
	m.intStatus.Store(st.IntStatus)
	m.needsReset.Store(st.NeedsReset)
	m.restored = &restoredQueues{live: live, start: st.Active && !st.NeedsReset}
	return nil
}

// restoredQueues is what a restored transport starts (Start): the queues'
// saved positions, and whether the device was running.
type restoredQueues struct {
	live  []*queue.State
	start bool
}

// Start carries a restored transport on: it rebuilds each queue over guest
// memory (which must be the memory saved with the state: the used index
// there must be the saved one), activates the device on them, and raises
// a pending interrupt again, since the restored interrupt controller may
// not hold it. Call it once the VMM is jailed (see Restore). A transport
// that was not restored, or was started, has nothing to start: Start does
// nothing. A queue that does not fit guest memory is an error, and the
// device stays inactive.
func (m *MMIO) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.restored
	if r == nil || m.closed {
		return nil
	}
	m.restored = nil
	if r.start {
		if err := m.passGate(); err != nil {
			return err
		}
		qs := make([]*queue.Queue, len(r.live))
		for i, ls := range r.live {
			if ls == nil {
				continue
			}
			q, err := queue.Restore(m.mem, *ls, m.maxSizes[i])
			if err != nil {
				return fmt.Errorf("virtio-mmio: restore queue %d: %w", i, err)
			}
			qs[i] = q
		}
		m.start(qs)
	}
	if m.intStatus.Load() != 0 {
		if err := m.irq.Trigger(); err != nil {
			m.log.Warn("virtio-mmio: raise interrupt after restore", "err", err)
		}
	}
	return nil
}

// checkState refuses a state that does not fit this device.
func (m *MMIO) checkState(st State) error {
	if st.DeviceType != m.dev.DeviceType() {
		return fmt.Errorf("virtio-mmio: restore: saved device type %d, this device is type %d", st.DeviceType, m.dev.DeviceType())
	}
	if len(st.Queues) != len(m.maxSizes) {
		return fmt.Errorf("virtio-mmio: restore: %d saved queues, the device has %d", len(st.Queues), len(m.maxSizes))
	}
	if st.DrvFeatures&^m.offered() != 0 {
		return fmt.Errorf("virtio-mmio: restore: the driver had features %#x this device does not offer (%#x)", st.DrvFeatures&^m.offered(), m.offered())
	}
	if st.IntStatus&^(InterruptUsedBuffer|InterruptConfigChange) != 0 {
		return fmt.Errorf("virtio-mmio: restore: interrupt status %#x", st.IntStatus)
	}
	if st.Active {
		if st.Status&virtio.StatusDriverOK == 0 || len(st.Live) != len(m.maxSizes) {
			return fmt.Errorf("virtio-mmio: restore: active device with status %#x and %d queue positions", st.Status, len(st.Live))
		}
		for i, ls := range st.Live {
			if (ls != nil) != st.Queues[i].Ready {
				return fmt.Errorf("virtio-mmio: restore: queue %d: ready %v, position saved %v", i, st.Queues[i].Ready, ls != nil)
			}
		}
	} else if len(st.Live) != 0 {
		return errors.New("virtio-mmio: restore: queue positions for an inactive device")
	}
	return nil
}
