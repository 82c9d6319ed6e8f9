package vmm

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/virtio"
	"github.com/cellvm/cellvm/virtio/mmio"
)

// Pausing a machine is the VMM's own doing, not a SIGSTOP of its process:
// each vCPU is kicked out of KVM_RUN (immediate_exit and a signal) and its
// thread parks, outside KVM_RUN, until Resume; then every virtio device
// stops its goroutines. A paused machine's state — vCPUs, interrupt
// controllers, devices, memory — stands still, which is what Save needs.
//
// A vCPU thread parks only after a KVM_RUN that immediate_exit cut short:
// that KVM_RUN first completes the I/O the last exit left pending (an MMIO
// read's value into its register), so the registers a save reads are whole.
// The parked thread also runs the work a save gives it (its own vCPU's
// state ioctls), so every vCPU ioctl comes from the vCPU's own thread.

// ErrNotRunning is returned by Pause for a machine whose vCPUs are not
// running: before Run, after the VM ended, or after Close.
var ErrNotRunning = errors.New("the machine is not running")

// snapshotting is a machine's pause, save and restore state. Whether the
// machine is paused, and the pause's request, are its life's (state.go).
type snapshotting struct {
	op sync.Mutex // one Pause, Resume or Save at a time, and Close

	devices []*virtioSlot // in the order AddVirtio attached them
	msrs    []uint32      // the MSRs a save reads, once known
}

// virtioSlot is one attached virtio device.
type virtioSlot struct {
	dev  virtio.Device
	t    *mmio.MMIO
	base uint64
	gsi  uint32
}

// pauseReq is one pause: the parked vCPU threads wait on resume and run
// what work sends them.
type pauseReq struct {
	resume chan struct{}
	parked chan struct{}                  // one value per vCPU thread that parked
	work   map[int]chan func(c *kvm.VCPU) // by vCPU ID
}

// interrupted runs on a vCPU thread after KVM_RUN returned because of a
// kick. It clears immediate_exit and, if the machine is pausing or paused,
// parks the thread until Resume (or the end of the VM), running the work it
// is sent. Clearing and looking happen under the lock Pause kicks under, so
// a kick is never lost between the two.
func (m *Machine) interrupted(c *kvm.VCPU) {
	m.life.mu.Lock()
	c.SetImmediateExit(false)
	var req *pauseReq
	if st := m.life.state; st == statePausing || st == statePaused {
		req = m.life.req
	}
	m.life.mu.Unlock()
	if req == nil {
		return
	}
	req.parked <- struct{}{}
	for {
		select {
		case f := <-req.work[c.ID]:
			f(c)
		case <-req.resume:
			return
		case <-m.life.ended:
			return
		}
	}
}

// Pause stops the machine: every vCPU out of KVM_RUN and parked, then every
// virtio device paused. It returns when the machine stands still, or with
// an error if the VM ends first or a device cannot pause (the machine then
// runs on). Pausing a paused machine does nothing.
func (m *Machine) Pause() error {
	m.snap.op.Lock()
	defer m.snap.op.Unlock()
	m.life.mu.Lock()
	if from, err := m.moveLocked(evPause); err != nil {
		m.life.mu.Unlock()
		if from == statePaused {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrNotRunning, err)
	}
	// The kicks happen under vcpuMu, as end's do, so Close cannot unmap a
	// vCPU's kvm_run under them.
	m.vcpuMu.Lock()
	vcpus := slices.Clone(m.vcpus)
	req := &pauseReq{resume: make(chan struct{}), parked: make(chan struct{}, len(vcpus)), work: map[int]chan func(*kvm.VCPU){}}
	for _, c := range vcpus {
		req.work[c.ID] = make(chan func(*kvm.VCPU))
	}
	m.life.req = req
	for _, c := range vcpus {
		c.Kick()
	}
	m.vcpuMu.Unlock()
	m.life.mu.Unlock()
	for range vcpus {
		select {
		case <-req.parked:
		case <-m.life.ended:
			m.releaseVCPUs(evPauseFailed) // refused: the machine stays ended
			return fmt.Errorf("pause: %w (the VM ended)", ErrNotRunning)
		}
	}
	for i, d := range m.snap.devices {
		if err := d.t.Pause(); err != nil {
			m.resumeDevices(i)
			m.releaseVCPUs(evPauseFailed)
			return fmt.Errorf("pause virtio device at %#x: %w", d.base, err)
		}
	}
	if _, err := m.move(evPaused); err != nil {
		// Only an end moves a pausing machine: it ended while its devices
		// paused.
		m.resumeDevices(len(m.snap.devices))
		m.releaseVCPUs(evPauseFailed)
		return fmt.Errorf("pause: %w (the VM ended: %v)", ErrNotRunning, err)
	}
	m.log.Info("vm paused")
	return nil
}

// resumeDevices resumes the first n virtio devices, which a Pause paused.
func (m *Machine) resumeDevices(n int) {
	for _, d := range m.snap.devices[:n] {
		d.t.Resume()
	}
}

// Resume carries on after Pause: devices first, then the vCPUs, each told
// (KVM_KVMCLOCK_CTRL) that it was stopped, so the guest's soft-lockup
// watchdog does not count the pause. Resuming a machine that is not paused
// (running, ended, closed) does nothing.
func (m *Machine) Resume() error {
	m.snap.op.Lock()
	defer m.snap.op.Unlock()
	if _, err := m.may(evResume); err != nil {
		return nil
	}
	m.resumeDevices(len(m.snap.devices))
	m.forEachVCPU(func(c *kvm.VCPU) error {
		c.KVMClockCtrl() // EINVAL when the guest has no kvmclock: nothing to tell
		return nil
	})
	m.releaseVCPUs(evResume) // refused if the VM ended meanwhile: it stays ended
	m.log.Info("vm resumed")
	return nil
}

// releaseVCPUs lets the parked vCPU threads go back into KVM_RUN, with
// the move e (resume, or pause-failed), under the lock the threads park
// under. A machine that ended meanwhile refuses the move and stays ended;
// its threads are released all the same.
func (m *Machine) releaseVCPUs(e machineEvent) {
	m.life.mu.Lock()
	defer m.life.mu.Unlock()
	m.moveLocked(e)
	if req := m.life.req; req != nil {
		close(req.resume)
		m.life.req = nil
	}
}

// forEachVCPU runs f on each parked vCPU's own thread, in vCPU order, and
// returns the first error. The machine must be paused (under snap.op).
func (m *Machine) forEachVCPU(f func(c *kvm.VCPU) error) error {
	req := m.life.req
	for _, c := range m.vcpuList() {
		done := make(chan error, 1)
		select {
		case req.work[c.ID] <- func(c *kvm.VCPU) { done <- f(c) }:
		case <-m.life.ended:
			return fmt.Errorf("vcpu %d: %w (the VM ended)", c.ID, ErrNotRunning)
		}
		if err := <-done; err != nil {
			return err
		}
	}
	return nil
}
