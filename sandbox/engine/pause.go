package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// Pause to disk. A paused sandbox has no VMM process: its VMM wrote the
// machine (a snapshot, as in snapshot.go) into the sandbox's directory and
// ended, so its memory went back to the host. Resume starts a new VMM
// process that restores those files: same sandbox id, vsock CID and
// socket, TAP, jail and cgroup, and the guest's interpreter with its
// variables; the agent reconnects and the guest is reseeded as a fork is
// (its clock above all: time passed while it was on disk). A call that
// needs the guest (a cell, a command, a file) resumes a paused sandbox by
// itself (ready), and Config.IdlePause pauses an idle one (reapLoop).
//
// The machine image lives in the sandbox directory:
//
//	paused.partial/  being written; never restored, removed on failure
//	paused/          the image of a paused sandbox (its presence, with no
//	                 live VMM, is what a restarted daemon takes back as
//	                 paused: recover)
//	backing/         the image a resumed VMM restored from: it maps the
//	                 memory file copy-on-write, so the file stays until the
//	                 next pause replaces it or the sandbox is deleted
//	paused/layer.N   the files under a pause's memory file when it is a
//	                 layer over the image the sandbox last resumed from
//	                 (pausechain.go)
//	paused/used      written just before a VMM starts from the image: from
//	                 then on the guest may run on from it (and write its
//	                 workspace), so the image is never resumed again. A
//	                 resume that fails after it loses the sandbox, and a
//	                 restarted daemon does not take back a used image.
//
// Images count against the snapshot disk cap (diskcap.go), like snapshots.
//
// A sandbox's life lock (vmSandbox.life) serialises pause, resume and
// destroy. A pause holds the sandbox busy as a cell does, so it is refused
// while a cell runs; the state reads paused from the pause's start, and a
// call arriving meanwhile waits on the lock and then resumes it.

const (
	pausedDir  = "paused"
	backingDir = "backing"
	usedMark   = "used"
)

// vmmExitTimeout bounds the wait for a VMM to end after it wrote its image.
const vmmExitTimeout = 30 * time.Second

// Pause implements Manager: the sandbox's VMM writes the machine to disk
// and ends.
func (m *VMManager) Pause(ctx context.Context, id string) error {
	s, err := m.get(id)
	if err != nil {
		return err
	}
	s.life.Lock()
	defer s.life.Unlock()
	return m.pauseLocked(ctx, s)
}

// pauseLocked pauses s; the caller holds s.life.
func (m *VMManager) pauseLocked(ctx context.Context, s *vmSandbox) error {
	if from, err := s.lc.move(evPauseStart); err != nil {
		if errors.Is(err, errCallsRunning) {
			return fmt.Errorf("%w: a command or a file transfer is running in sandbox %s; pause it after", sandbox.ErrBusy, s.id)
		}
		switch from {
		case phaseCell, phaseSnapshotting:
			return fmt.Errorf("%w: a cell is running in sandbox %s; interrupt it or wait, then pause", sandbox.ErrBusy, s.id)
		case phasePaused:
			return fmt.Errorf("%w: sandbox %s is already paused", sandbox.ErrBusy, s.id)
		case phaseLost:
			return fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, s.id)
		default:
			return fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrBusy, s.id, from.State())
		}
	}
	s.cellDeadline.Store(time.Now().Add(snapshotTimeout).UnixNano())
	// Until the image is kept, any way out is a failed pause: the VM runs
	// on (or, if it went meanwhile, the move is refused and it stays lost).
	settled := false
	defer func() {
		if !settled {
			s.lc.move(evPauseFailed)
		}
	}()
	if _, err := os.Stat(hostControlPath(s.dir)); err != nil {
		return fmt.Errorf("%w: sandbox %s's VMM has no control socket (it was started by an older cellvm)", sandbox.ErrNotSupported, s.id)
	}
	release, err := m.disk.reserve(m, "pause", s.id, imageBound(s.cfg.MemoryMiB))
	if err != nil {
		return err
	}
	defer release()
	tmp := filepath.Join(s.dir, pausedDir+partialSuffix)
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("pause directory: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	// A sandbox resumed from its own image pauses as a layer over it.
	linked, err := linkChain(s.dir, tmp)
	if err != nil {
		m.log.Warn("a pause writes a whole image: its chain could not be kept", "id", s.id, "error", err)
	}
	start := time.Now()
	p := s.proc
	// From here the VMM's exit is the pause's, not a lost VM (markLost),
	// and calls wait for the pause and then resume (ready).
	p.ended.Store(true)
	// A pause once asked for is carried through: the VMM ends after its
	// save whether or not the caller still waits, so the daemon waits for
	// the save as long as it takes (the VMM's save has no deadline, and
	// giving up first would throw away the image of a VM that then ends
	// all the same). Only a delete ends the wait (abortPause); past
	// pausePatience it is logged.
	saveCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	s.setPauseAbort(abort)
	defer s.setPauseAbort(nil)
	slow := time.AfterFunc(pausePatience, func() {
		m.log.Warn("a pause is taking long; waiting for the VMM's save", "id", s.id, "waited", pausePatience)
	})
	err = m.saveMachine(saveCtx, s, tmp, control.ThenStop, linked)
	slow.Stop()
	var answered *control.Error
	if err != nil && saveCtx.Err() == nil && !errors.As(err, &answered) && vmGone(s, lostGrace) && savedThenStopped(s.dir) {
		// No answer came, but the VMM's End report says it wrote its
		// machine and stopped as asked: the image is complete.
		m.log.Warn("a pause's reply was lost, but its VMM ended after its save; keeping the image", "id", s.id, "error", err)
		err = nil
	}
	if err != nil {
		p.ended.Store(false)
		s.lc.move(evPauseFailed)
		settled = true
		wait := time.Duration(0) // a VMM that went down ends the exchange first
		if streamEnded(err) {
			wait = lostGrace
		}
		if vmGone(s, wait) {
			m.markLost(s)
			return fmt.Errorf("%w: sandbox %s's VM exited during the pause", sandbox.ErrLost, s.id)
		}
		if errors.Is(err, control.CodeNoSpace) || errors.Is(err, syscall.ENOSPC) {
			return fmt.Errorf("%w: the host's disk is full, sandbox %s keeps running: %v", sandbox.ErrFull, s.id, err)
		}
		return fmt.Errorf("pause sandbox %s (it keeps running): %w", s.id, err)
	}
	// The image is complete: the VMM ends on its own (control.ThenStop);
	// one that hangs is killed, since nothing of it is needed any more.
	select {
	case <-p.done:
	case <-time.After(vmmExitTimeout):
		m.log.Warn("a paused sandbox's VMM did not exit; killing it", "id", s.id, "pid", p.pid)
		p.kill()
		<-p.done
	}
	// The VMM's cgroup goes with it; a resume makes it again.
	if err := s.cgroup.Close(); err != nil {
		m.log.Warn("remove a paused sandbox's VMM cgroup", "id", s.id, "error", err)
	}
	s.cgroup = nil
	if err := settleChain(tmp, linked); err != nil {
		// The VM is gone and its image cannot be restored: it is lost.
		settled = true
		m.loseOnPurpose(s, fmt.Sprintf("its pause image is incomplete: %v", err))
		return fmt.Errorf("pause sandbox %s: %w", s.id, err)
	}
	if err := os.RemoveAll(filepath.Join(s.dir, backingDir)); err != nil {
		m.log.Warn("remove the image a resumed VMM restored from", "id", s.id, "error", err)
	}
	if err := renameDurable(tmp, filepath.Join(s.dir, pausedDir)); err != nil {
		// The VM is gone and its image cannot be named: it is lost.
		settled = true
		m.loseOnPurpose(s, fmt.Sprintf("its pause image could not be kept: %v", err))
		return fmt.Errorf("pause sandbox %s: %w", s.id, err)
	}
	trustImage(filepath.Join(s.dir, pausedDir))
	done = true
	s.lc.move(evPaused)
	settled = true
	s.agent.DropIdle()
	m.startFold(s)
	m.log.Info("sandbox paused to disk", "id", s.id, "took_ms", time.Since(start).Milliseconds(),
		"image_bytes", dirUsage(filepath.Join(s.dir, pausedDir)))
	m.events.Publish(sandbox.Event{Type: sandbox.EventPaused, Sandbox: s.id, Tenant: s.cfg.Tenant})
	return nil
}

// Resume implements Manager.
func (m *VMManager) Resume(ctx context.Context, id string) error {
	s, err := m.get(id)
	if err != nil {
		return err
	}
	s.life.Lock()
	defer s.life.Unlock()
	if ph := s.lc.phase(); ph != phasePaused {
		return fmt.Errorf("%w: sandbox %s is %s, not paused", sandbox.ErrBusy, id, ph.State())
	}
	return m.resumeLocked(ctx, s)
}

// autoResume resumes a paused sandbox for a call that needs its guest
// (ready); a pause in progress is waited for first.
func (m *VMManager) autoResume(s *vmSandbox) error {
	s.life.Lock()
	defer s.life.Unlock()
	switch st := s.State(); st {
	case sandbox.StateRunning:
		return nil // resumed meanwhile, or the pause failed
	case sandbox.StatePaused:
		ctx, cancel := context.WithTimeout(context.Background(), m.opt.BootTimeout)
		defer cancel()
		return m.resumeLocked(ctx, s)
	case sandbox.StateLost:
		return fmt.Errorf("%w: sandbox %s's VM exited; delete it", sandbox.ErrLost, s.id)
	default:
		return fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrBusy, s.id, st)
	}
}

// resumeLocked starts a VMM that restores s's image; the caller holds
// s.life and s is paused. A resume that fails before the VMM starts leaves
// s paused, with its image, and says why; one that fails after it has
// used the image (paused/used) and loses s: the guest may have run on
// from it, and resuming it again would run the same moment twice (and,
// with a workspace, mount an ext4 the first run already changed).
func (m *VMManager) resumeLocked(ctx context.Context, s *vmSandbox) (err error) {
	if from, err := s.lc.move(evResumeStart); err != nil {
		return fmt.Errorf("%w: sandbox %s is %s, not paused", sandbox.ErrBusy, s.id, from.State())
	}
	// Its pause image is whole or a chain from here, not being folded.
	s.stopFold()
	used := false
	defer func() {
		switch {
		case err == nil:
		case used:
			m.loseResume(s, err)
			if !errors.Is(err, sandbox.ErrLost) {
				err = fmt.Errorf("%w: %v; the sandbox is lost (its pause image is used)", sandbox.ErrLost, err)
			}
		default:
			s.lc.move(evResumeFailed)
		}
	}()
	if err := m.memoryForResume(s); err != nil {
		return err
	}
	// A slot to start the VM in (admit.go), before the image is used: a
	// resume refused or given up while it waits stays paused. Its boot
	// deadline (bootCtx, startVMM's) counts from here.
	release, queued, err := m.admit.admit(ctx, false)
	if err != nil {
		return fmt.Errorf("resume sandbox %s (it stays paused): %w", s.id, err)
	}
	defer release()
	image := filepath.Join(s.dir, pausedDir)
	spec, err := control.ReadSpec(filepath.Join(s.dir, specFile))
	if err != nil {
		return fmt.Errorf("resume sandbox %s: its VMM config: %w", s.id, err)
	}
	if err := m.sameImage(s.cfg.Tenant, s.cfg.Image, spec.ImageUUID, "resume sandbox "+s.id); err != nil {
		return err
	}
	// The restoring VMM listens where the last one did.
	for _, f := range []string{vsockFile, controlFile} {
		os.Remove(filepath.Join(runDir(s.dir), f))
	}
	st := vmStart{spec: spec, files: control.Files{}, keepLogs: true}
	defer st.files.Close() // startVMM's once it is called
	if spec.Jail != nil && spec.Jail.Cgroup != "" {
		// The cgroup the jail names, made again (a pause removed it).
		cg := spec.Jail.Cgroup
		if st.cgroup, err = jail.NewCgroup(filepath.Dir(cg), filepath.Base(cg), vmCgroupLimits(&spec)); err != nil {
			return fmt.Errorf("resume sandbox %s: the VMM's cgroup: %w", s.id, err)
		}
		defer func() {
			if err != nil {
				st.cgroup.Close()
			}
		}()
	}
	for i, d := range spec.Disks {
		if !d.Passed {
			continue
		}
		// The workspace, held by s all the while it was paused.
		ws, err := m.openWorkspace(ctx, s.cfg.Tenant, s.cfg.Workspace, false)
		if err != nil {
			return fmt.Errorf("resume sandbox %s: %w", s.id, err)
		}
		st.files[control.DiskSlot(i)] = ws
	}
	if spec.Net != nil {
		if s.net == nil {
			return fmt.Errorf("resume sandbox %s: its machine has a NIC, and the sandbox no network now", s.id)
		}
		tap, err := netpolicy.OpenTAP(s.net.TAP)
		if err != nil {
			return fmt.Errorf("resume sandbox %s: network: %w", s.id, err)
		}
		st.files[control.SlotTAP] = tap
	}
	if err := openImage(image, &st); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", s.id, err)
	}
	if _, err := os.Stat(filepath.Join(image, usedMark)); err == nil {
		used = true
		return fmt.Errorf("%w: sandbox %s's pause image was used by a resume that failed; it is not resumed twice", sandbox.ErrLost, s.id)
	}
	if err := markReseedPending(s.dir, agentclient.RenewKernel); err != nil {
		return fmt.Errorf("resume sandbox %s (it stays paused): %w", s.id, err)
	}
	if err := markUsed(image); err != nil {
		return fmt.Errorf("resume sandbox %s (it stays paused): %w", s.id, err)
	}
	used = true
	// From here a failure loses the sandbox, so the caller going away
	// does not end the resume; BootTimeout and reseedTimeout bound it.
	ctx = context.WithoutCancel(ctx)
	bootCtx, cancel := context.WithTimeout(ctx, m.opt.BootTimeout)
	defer cancel()
	start := time.Now()
	p, c, err := m.startVMM(ctx, s.dir, st, "resuming")
	if err != nil {
		if neverRan(s.dir) {
			// The VMM says the machine never ran (its spec, jail or
			// restore failed first): the image is as it was.
			if rerr := os.Remove(filepath.Join(image, usedMark)); rerr == nil {
				used = false
				return fmt.Errorf("resume sandbox %s (it stays paused): %w", s.id, err)
			}
		}
		return fmt.Errorf("resume sandbox %s: %w", s.id, err)
	}
	defer func() {
		if err != nil {
			p.ended.Store(true)
			p.stop(5 * time.Second)
		}
	}()
	if s.agent == nil {
		s.agent = c // a sandbox taken back paused
	} else {
		// The sandbox's client dials the new VM afresh; the probe's goes.
		c.Close()
		s.agent.DropIdle()
	}
	if err := m.newMachine(bootCtx, s, agentclient.RenewKernel); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", s.id, err)
	}
	os.Remove(filepath.Join(s.dir, reseedPendingFile))
	if err := renameDurable(image, filepath.Join(s.dir, backingDir)); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", s.id, err)
	}
	s.netMu.Lock()
	s.proc = p
	s.netMu.Unlock()
	s.cgroup = st.cgroup
	if s.ck != nil {
		s.ck.resumed.Store(true) // checkpointrun.go
	}
	s.lastUsed.Store(time.Now().UnixNano())
	s.lc.move(evResumed)
	go m.watch(s)
	m.log.Info("sandbox resumed from disk", "id", s.id, "took_ms", time.Since(start).Milliseconds(), "queued_ms", queued.Milliseconds(), "pid", p.pid)
	m.events.Publish(sandbox.Event{Type: sandbox.EventResumed, Sandbox: s.id, Tenant: s.cfg.Tenant})
	return nil
}

// markUsed writes image's used mark, durably: a daemon that dies after
// the VMM started must find it.
func markUsed(image string) error {
	f, err := os.OpenFile(filepath.Join(image, usedMark), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("mark the pause image used: %w", err)
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(image); err == nil {
			err = d.Sync()
			d.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("mark the pause image used: %w", err)
	}
	return nil
}

// neverRan reports whether the VMM of the sandbox in dir, which ended,
// said in its End report that its machine never ran (ReasonStartFailed:
// it failed before the guest's first instruction). No report, or any
// other, is not proof.
func neverRan(dir string) bool {
	end, err := control.ReadEnd(filepath.Join(dir, endFile))
	return err == nil && end != nil && end.Reason == control.ReasonStartFailed
}

// loseResume marks s lost after a resume failed once its VMM had started
// from the image (why), which is used now and never resumed again.
func (m *VMManager) loseResume(s *vmSandbox, why error) {
	info := sandbox.LostInfo{Reason: fmt.Sprintf("its resume failed after its VM had started from the pause image, "+
		"which the guest may have run on from, so it is not resumed twice: %v", why)}
	if _, err := s.lc.move(evVMExited); err == nil {
		s.lost.Store(&info)
		m.events.Publish(sandbox.Event{Type: sandbox.EventLost, Sandbox: s.id, Tenant: s.cfg.Tenant, Lost: &info, Egress: m.egressReport(s)})
		m.log.Error("sandbox lost in a resume", "id", s.id, "reason", info.Reason)
	}
}

// openImage opens the two files of an image (a snapshot's, a paused
// sandbox's) into st's restore slots, and the chain under its memory file
// into the layer slots (pausechain.go), and makes st's spec a restore.
func openImage(dir string, st *vmStart) error {
	for _, f := range []struct{ slot, name string }{
		{control.SlotRestoreState, snapStateFile},
		{control.SlotRestoreMemory, snapMemFile},
	} {
		file, err := os.Open(filepath.Join(dir, f.name))
		if err != nil {
			return fmt.Errorf("machine image: %w", err)
		}
		st.files[f.slot] = file
	}
	state, mem := st.files[control.SlotRestoreState], st.files[control.SlotRestoreMemory]
	if err := verifyImage(state, mem); err != nil {
		return err
	}
	if sum, err := snapshot.MemorySum(state); err == nil {
		// Verified: when a pause makes it a chain's file, it is not
		// summed again (layerChecks).
		layerChecks.remember(mem, sum)
	}
	st.spec.Restore = &control.Restore{}
	return openChain(dir, st)
}

// pausePatience is how long a pause waits for the VMM's save before it
// says so in the log; it goes on waiting.
var pausePatience = snapshotTimeout

// savedThenStopped reports whether the VMM of the sandbox in dir, which
// ended, said in its End report that it wrote its machine and stopped as
// a pause asked (ReasonSnapshotStop): its image is complete.
func savedThenStopped(dir string) bool {
	end, err := control.ReadEnd(filepath.Join(dir, endFile))
	return err == nil && end != nil && end.Reason == control.ReasonSnapshotStop
}

// setPauseAbort sets (nil: clears) what ends a pause's wait for its save.
func (s *vmSandbox) setPauseAbort(f context.CancelFunc) {
	s.netMu.Lock()
	s.pauseAbort = f
	s.netMu.Unlock()
}

// abortPause ends the wait of a pause in progress for its save (a delete
// does, before it waits for the pause's lock).
func (s *vmSandbox) abortPause() {
	s.netMu.Lock()
	f := s.pauseAbort
	s.netMu.Unlock()
	if f != nil {
		f()
	}
}

// loseOnPurpose marks s lost after its VMM was ended by a pause that could
// not keep the image.
func (m *VMManager) loseOnPurpose(s *vmSandbox, reason string) {
	why := sandbox.LostInfo{Reason: "the sandbox was being paused and " + reason}
	if _, err := s.lc.move(evVMExited); err == nil {
		s.lost.Store(&why)
		m.events.Publish(sandbox.Event{Type: sandbox.EventLost, Sandbox: s.id, Tenant: s.cfg.Tenant, Lost: &why, Egress: m.egressReport(s)})
		m.log.Error("sandbox lost in a pause", "id", s.id, "reason", why.Reason)
	}
}

// pauseIdle pauses, each on a goroutine of its own, the running sandboxes
// idle for longer than their Config.IdlePause (reapLoop calls it).
func (m *VMManager) pauseIdle(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	for _, s := range m.sandboxes {
		if s.internal || s.cfg.IdlePause <= 0 || s.lc.phase() != phaseRunning || s.lc.held() ||
			now.Sub(time.Unix(0, s.lastUsed.Load())) <= s.cfg.IdlePause {
			continue
		}
		go func() {
			s.life.Lock()
			defer s.life.Unlock()
			// Used since it was found idle, or a call runs: leave it
			// running.
			if time.Since(time.Unix(0, s.lastUsed.Load())) <= s.cfg.IdlePause || s.lc.held() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
			defer cancel()
			if err := m.pauseLocked(ctx, s); err != nil {
				if s.State() != sandbox.StatePaused {
					m.log.Warn("idle sandbox not paused", "id", s.id, "error", err)
				}
				return
			}
			m.log.Info("idle sandbox paused", "id", s.id, "idle_pause", s.cfg.IdlePause)
		}()
	}
}

// heldMemoryMiB is the guest memory s holds on the host: none while it is
// paused to disk.
func (s *vmSandbox) heldMemoryMiB() int {
	if s.State() == sandbox.StatePaused {
		return 0
	}
	return s.cfg.MemoryMiB
}

// memoryForResume checks the host's memory cap for s's resume.
func (m *VMManager) memoryForResume(s *vmSandbox) error {
	if m.opt.MaxMemoryMiB <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	used := 0
	for _, o := range m.sandboxes {
		used += o.heldMemoryMiB()
	}
	if used+s.cfg.MemoryMiB > m.opt.MaxMemoryMiB {
		return fmt.Errorf("%w: sandbox %s stays paused: %d MiB of guest memory in use, its %d MiB would pass the cap of %d MiB",
			sandbox.ErrFull, s.id, used, s.cfg.MemoryMiB, m.opt.MaxMemoryMiB)
	}
	return nil
}

// takeBackPaused takes back, as paused, a sandbox an earlier daemon left
// with its image on disk and no VMM process (recover), and reports
// whether it did.
func (m *VMManager) takeBackPaused(s *vmSandbox, spec control.Spec) bool {
	if spec.Vsock == nil {
		return false
	}
	m.keepCompletePartial(s)
	recoverFold(s.dir)
	for _, f := range []string{snapStateFile, snapMemFile} {
		if _, err := os.Stat(filepath.Join(s.dir, pausedDir, f)); err != nil {
			return false
		}
	}
	if _, err := os.Stat(filepath.Join(s.dir, pausedDir, usedMark)); err == nil {
		m.log.Warn("a paused sandbox's image was used by a resume that did not finish; it is not taken back", "id", s.id)
		return false
	}
	os.RemoveAll(filepath.Join(s.dir, pausedDir+partialSuffix))
	os.RemoveAll(filepath.Join(s.dir, backingDir))
	s.cid = spec.Vsock.CID
	s.proc = nil
	s.lc.adopt(phasePaused)
	return true
}

// keepCompletePartial names paused/ the image in paused.partial of a
// sandbox with no VMM left whose last VMM said it wrote its machine and
// stopped as a pause asked (savedThenStopped): the daemon died between
// the save and the rename, and the image is complete.
func (m *VMManager) keepCompletePartial(s *vmSandbox) {
	partial, paused := filepath.Join(s.dir, pausedDir+partialSuffix), filepath.Join(s.dir, pausedDir)
	if _, err := os.Stat(paused); err == nil || !savedThenStopped(s.dir) {
		return
	}
	for _, f := range []string{snapStateFile, snapMemFile} {
		if _, err := os.Stat(filepath.Join(partial, f)); err != nil {
			return
		}
	}
	os.RemoveAll(filepath.Join(s.dir, backingDir))
	if err := renameDurable(partial, paused); err != nil {
		m.log.Warn("a complete pause image could not be kept", "id", s.id, "error", err)
		return
	}
	m.log.Info("kept the complete pause image of a daemon that died before naming it", "id", s.id)
}

// keepBacking tidies the image directories of a sandbox taken back
// running: an image it was resumed from is its backing now, and a pause
// cut short by the daemon's end is removed.
func keepBacking(dir string) {
	recoverFold(dir)
	os.RemoveAll(filepath.Join(dir, pausedDir+partialSuffix))
	if _, err := os.Stat(filepath.Join(dir, pausedDir)); err == nil {
		os.RemoveAll(filepath.Join(dir, backingDir))
		renameDurable(filepath.Join(dir, pausedDir), filepath.Join(dir, backingDir))
	}
}
