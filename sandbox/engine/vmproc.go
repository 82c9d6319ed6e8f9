package engine

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/control"
	"golang.org/x/sys/unix"
)

// vmStart is one VMM process to start: its spec (control.Spec, the one
// description of a VMM process) and the files it is handed in the spec's
// slots, besides the End report's, which startVMM adds.
type vmStart struct {
	spec  control.Spec
	files control.Files
	// cgroup is the cgroup the process starts in (nil: none).
	cgroup *jail.Cgroup
	// keepLogs appends to the console and VMM logs (a resumed VM's)
	// instead of starting them afresh.
	keepLogs bool
	// spawned, when set, is called with the process as soon as it runs,
	// before its agent answers: a launch makes it the sandbox's there, so
	// that a destroy meanwhile (the manager's Close) stops it.
	spawned func(*vmProc)
	// env is added to vmmEnv: Options.ExeEnv, the role variables of a
	// test binary that runs as cellvm.
	env []string
	// pooled is the pooled process the start took with its sandbox's id
	// (reserve), born in cgroup; nil: none. spawnVMM claims or ends it.
	pooled *pooledVMM
}

// vmProc is a running `cellvm vmm` process. It runs in its own session so
// that it outlives a daemon crash (a restarted daemon takes it back), and a
// signal to the daemon's process group does not reach it.
type vmProc struct {
	pid int
	dir string
	cmd *exec.Cmd // nil when adopted from an earlier daemon
	// pidfd holds an adopted process (nil: started here, or a kernel
	// without pidfds): its signals cannot reach a process that reused
	// its pid.
	pidfd *os.File
	// rec is what was recorded of the process (procRecord).
	rec  procRecord
	done chan struct{}
	err  error // valid after done
	// ended says the daemon ended the process on purpose, keeping the VM
	// (a pause to disk): its exit does not make the sandbox lost.
	ended atomic.Bool
	// exitSeen is markLost's: the process's own exit is handled once.
	exitSeen sync.Once
	// spawnTook is how long the clone and exec of a process started
	// here took (its namespaces and cgroup included), for a slow start's
	// log line.
	spawnTook time.Duration
	// pooled says the process came from the VMM pool (vmmpool.go):
	// spawnTook is its claim's.
	pooled bool

	// readyMu guards ready, the listener of the agent's ready signal
	// (proto.ReadyPort) with the connection it holds, kept for the VM's
	// life so that the agent, which announces itself again when a
	// snapshot resets it, always finds it; it is closed when the process
	// has exited.
	readyMu sync.Mutex
	ready   io.Closer
	exited  bool
}

// keepReady gives p the agent's ready listener c (nil: none); it is
// closed at once if p has exited.
func (p *vmProc) keepReady(c io.Closer) {
	if c == nil {
		return
	}
	p.readyMu.Lock()
	defer p.readyMu.Unlock()
	if p.exited {
		c.Close()
		return
	}
	if p.ready != nil {
		p.ready.Close()
	}
	p.ready = c
}

// exit records that p's process has exited and closes its ready
// connection; it runs once, before done is closed.
func (p *vmProc) exit(err error) {
	p.readyMu.Lock()
	p.exited = true
	if p.ready != nil {
		p.ready.Close()
		p.ready = nil
	}
	p.readyMu.Unlock()
	p.err = err
	close(p.done)
}

const (
	specFile    = "vmm.json"
	configFile  = "sandbox.json"
	consoleFile = "console.log"
	vmmLogFile  = "vmm.log"
	// endFile is the VMM's End report (control.End), written by the VMM
	// through the descriptor it was handed in control.SlotEnd.
	endFile     = "vmm-end.json"
	vsockFile   = "vsock.sock"
	controlFile = "control.sock"
	// startedFromFile holds Info.StartedFrom, for a daemon that takes the
	// sandbox back.
	startedFromFile = "started_from"
)

// startVMM starts the VMM process of st for the sandbox in dir and waits
// until its guest's agent answers (awaitAgent), within m's boot timeout:
// woken by the agent's ready signal, whose socket it opens before the
// process starts (listenReady), and which the process keeps for its life.
// It is the one way a sandbox's VM starts: booted or restored from a
// snapshot or template (launch, a fork), or from its paused image
// (resume). what says what the VM was doing, for the error of one that
// exits first ("booting", "resuming"). A process whose agent never
// answers is stopped before startVMM returns its error. st.files are
// closed: the process has its own descriptors.
func (m *VMManager) startVMM(ctx context.Context, dir string, st vmStart, what string) (*vmProc, *agentclient.Client, error) {
	st.env = m.opt.ExeEnv
	ready, err := listenReady(&st.spec)
	if err != nil {
		// The signal only saves time: without it, the agent is polled.
		m.log.Warn("no ready signal for this VM; polling its agent", "vm", filepath.Base(dir), "err", err)
		ready = nil
	}
	start := time.Now()
	// A start that hangs says where the kernel holds it: the daemon's
	// own clone, or the VMM's threads.
	var spawned atomic.Pointer[vmProc]
	var answered atomic.Bool
	look := func() {
		if answered.Load() {
			return
		}
		if p := spawned.Load(); p != nil {
			m.log.Info("a VM is slow to start", "vm", filepath.Base(dir), "what", what, "after_ms", time.Since(start).Milliseconds(), "pid", p.pid, "vmm_stacks", kernelStacks(p.pid, false))
			return
		}
		m.log.Info("a VMM process is slow to spawn", "vm", filepath.Base(dir), "what", what, "after_ms", time.Since(start).Milliseconds(), "daemon_stacks", kernelStacks(os.Getpid(), false))
	}
	// Twice: at 10 s, and at 40 s for a start that hangs (one took a
	// minute), whose stacks may have moved.
	for _, after := range []time.Duration{slowAgent, 4 * slowAgent} {
		defer time.AfterFunc(after, look).Stop()
	}
	p, err := spawnVMM(m.opt.Exe, dir, st, m.pool)
	if err != nil {
		if ready != nil {
			ready.Close()
		}
		return nil, nil, err
	}
	spawned.Store(p)
	if st.spawned != nil {
		st.spawned(p)
	}
	c, err := awaitAgent(ctx, p, dir, m.opt.BootTimeout, what, ready)
	answered.Store(true)
	if err != nil {
		if ready != nil {
			ready.Close()
		}
		p.ended.Store(true)
		p.stop(5 * time.Second)
		return nil, nil, err
	}
	signalled := ready != nil && isClosed(ready.Ready())
	if ready != nil {
		p.keepReady(ready) // for the VM's life: closed when it exits
	}
	took := time.Since(start)
	if took < slowAgent {
		m.log.Debug("the VM's agent answered", "vm", filepath.Base(dir), "signalled", signalled, "agent_ms", took.Milliseconds())
	} else {
		// A slow answer says what its attempts spent the time on.
		var tries []string
		for _, t := range c.Tries() {
			tries = append(tries, fmt.Sprintf("+%dms took %dms: %s", t.Start.Sub(start).Milliseconds(), t.Took.Milliseconds(), cmp.Or(t.Err, "ok")))
		}
		m.log.Info("the VM's agent answered", "slow", true, "vm", filepath.Base(dir), "what", what, "signalled", signalled, "agent_ms", took.Milliseconds(), "spawn_ms", p.spawnTook.Milliseconds(), "tries", tries,
			"vmm_log", lastLines(readTail(filepath.Join(dir, vmmLogFile), 4096), 10), "console", lastLines(consoleTail(dir, 4096), 10))
	}
	return p, c, nil
}

// slowAgent is the wait for an agent past which its attempts are logged.
const slowAgent = 10 * time.Second

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// spawnVMM writes st's spec into dir and starts exe (the cellvm binary) as
// its VMM process, the files in their slots and a fresh End report file
// in control.SlotEnd: a process claimed from pool when it has one ready
// (vmmpool.go), else one started here.
func spawnVMM(exe, dir string, st vmStart, pool *vmmPool) (*vmProc, error) {
	defer st.files.Close()
	taken := st.pooled
	defer func() {
		if taken != nil { // not claimed: nothing else ends it
			taken.end()
		}
	}()
	end, err := os.OpenFile(filepath.Join(dir, endFile), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	files := control.Files{control.SlotEnd: end}
	for slot, f := range st.files {
		files[slot] = f
	}
	defer end.Close()
	extra, err := st.spec.Pass(files)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, specFile)
	if err := control.WriteSpec(cfg, st.spec); err != nil {
		return nil, err
	}
	// Read-write, not append: the VMM compacts its capped console log in
	// place through this descriptor (vmm/consolelog).
	fresh := os.O_TRUNC
	if st.keepLogs {
		fresh = 0
	}
	console, err := os.OpenFile(filepath.Join(dir, consoleFile), os.O_CREATE|os.O_RDWR|fresh, 0o600)
	if err != nil {
		return nil, err
	}
	defer console.Close()
	if _, err := console.Seek(0, io.SeekEnd); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, vmmLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND|fresh, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	// The process record replaces an earlier one (a resume's); until the
	// new one is written, none names a process that is gone.
	os.Remove(filepath.Join(dir, procFile))
	// A pooled process is in the jail's namespaces exactly when the
	// daemon jails: one of the other kind is never handed a spec (a
	// jailed spec's pivot_root in the host's mount namespace).
	v := taken
	taken = nil // claimWith ends it if it fails
	if v == nil {
		v = pool.claimFor(st.spec.Jail != nil)
	}
	if v != nil {
		p, err := claimWith(v, dir, cfg, st, console, logf, extra)
		if err == nil {
			return p, nil
		}
		pool.log.Warn("vmm pool: a claim failed; starting a process of its own", "vm", filepath.Base(dir), "pid", v.pid, "err", err)
	}
	cmd := vmmCommand(exe, cfg, st)
	cmd.Stdout, cmd.Stderr = console, logf
	cmd.ExtraFiles = extra
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vmm process: %w", err)
	}
	p := &vmProc{pid: cmd.Process.Pid, dir: dir, cmd: cmd, done: make(chan struct{}), rec: procRecord{PID: cmd.Process.Pid}, spawnTook: time.Since(t0)}
	if st.cgroup != nil {
		p.rec.Cgroup = st.cgroup.Path
	}
	// Our child cannot be reaped (nor its pid reused) before cmd.Wait, so
	// its stat is its own. A daemon that dies before the record is
	// written leaves the process in its cgroup, which the next daemon's
	// sweep kills (sweepCgroups).
	start, err := procStartTime(p.pid)
	if err == nil {
		p.rec.StartTime = start
		err = recordProc(dir, p.rec)
	}
	if err != nil {
		cmd.Process.Kill()
		st.cgroup.Kill()
		cmd.Wait()
		return nil, err
	}
	go func() { p.exit(cmd.Wait()) }()
	return p, nil
}

// claimWith claims the pooled process v for the sandbox in dir, its spec
// written at cfg (claimPooled).
func claimWith(v *pooledVMM, dir, cfg string, st vmStart, console, logf *os.File, extra []*os.File) (*vmProc, error) {
	spec, err := os.Open(cfg)
	if err != nil {
		v.end()
		return nil, err
	}
	defer spec.Close()
	return claimPooled(v, dir, st, spec, console, logf, extra)
}

// awaitAgent waits until the agent of the VM of process p (the sandbox in
// dir) answers, for at most timeout, or p exits first: the one way the
// daemon waits for a guest, whether it started the VMM (startVMM) or took
// it back from an earlier daemon (recover). With ready (startVMM's), it
// dials when the agent signals, polling only every readyFallback; without
// (recover), it polls. The error of a VM that exited
// says why (its End report with its exit status: lostInfo) and quotes the
// ends of its VMM log and console for a human.
func awaitAgent(ctx context.Context, p *vmProc, dir string, timeout time.Duration, what string, ready *agentclient.ReadyListener) (*agentclient.Client, error) {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type dialed struct {
		c   *agentclient.Client
		err error
	}
	answered := make(chan dialed, 1)
	go func() {
		var d dialed
		if ready != nil {
			d.c, d.err = agentclient.DialSignalled(waitCtx, hostVsockPath(dir), ready.Ready(), readyFallback)
		} else {
			d.c, d.err = agentclient.Dial(waitCtx, hostVsockPath(dir))
		}
		answered <- d
	}()
	select {
	case d := <-answered:
		if d.err != nil && ctx.Err() == nil && waitCtx.Err() != nil {
			return nil, fmt.Errorf("guest agent did not answer within %v: %w; vmm log: %s; console: %s", timeout, d.err,
				lastLines(readTail(filepath.Join(dir, vmmLogFile), 2048), 5), lastLines(consoleTail(dir, 4096), 15))
		}
		return d.c, d.err
	case <-p.done:
		cancel()
		if d := <-answered; d.c != nil {
			d.c.Close()
		}
		why := p.lostInfo()
		return nil, fmt.Errorf("the VM exited while %s (%s; %s); vmm log: %s; console: %s", what, why.Exit, why.Reason,
			lastLines(readTail(filepath.Join(dir, vmmLogFile), 8192), 12), lastLines(consoleTail(dir, 4096), 15))
	}
}

// vmmEnv is the whole environment of a VMM process. It inherits nothing
// of the daemon's: the daemon's variables (tokens, proxies, paths) are
// none of a VMM's business, and a compromised VMM reads its own. The one
// variable it needs: the Go runtime's periodic look at its cgroup's CPU
// limit would only meet the jail's seccomp filter (EACCES).
var vmmEnv = []string{"GODEBUG=updatemaxprocs=0"}

// vmmTestEnv, set by this package's tests only, adds the variables that
// give the test binary its fake VMM's role.
var vmmTestEnv func() []string

// vmmCommand is the command of st's VMM process, its spec at cfg: its own
// session (it outlives a daemon crash, and a signal to the daemon's
// process group does not reach it), its jail's namespaces, its cgroup
// from the first instruction, and vmmEnv.
func vmmCommand(exe, cfg string, st vmStart) *exec.Cmd {
	return vmmProcess(exe, control.Args(cfg), st.env, st.spec.Jail != nil, st.cgroup)
}

// vmmProcess is the command of a VMM process with args: its own session,
// the jail's namespaces when jailed, cgroup (nil: none) from its first
// instruction, and vmmEnv with env. A pooled process (vmmpool.go) is one
// too, started before its spec exists.
func vmmProcess(exe string, args, env []string, jailed bool, cgroup *jail.Cgroup) *exec.Cmd {
	cmd := exec.Command(exe, args...)
	cmd.Env = append(slices.Clone(vmmEnv), env...)
	if vmmTestEnv != nil {
		cmd.Env = append(cmd.Env, vmmTestEnv()...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: 0}
	if jailed {
		cmd.SysProcAttr.Cloneflags = jail.Cloneflags
	}
	if cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cgroup.FD()
	}
	return cmd
}

// adoptVM finds the VMM process an earlier daemon started for dir, by its
// record (procRecord: pid, start time, cgroup), if it is still alive and
// still that process, whatever its argv says now.
func adoptVM(dir string) (*vmProc, error) {
	rec, err := readProcRecord(dir)
	if err != nil {
		return nil, err
	}
	pidfd, err := findRecorded(rec)
	if err != nil {
		return nil, err
	}
	p := &vmProc{pid: rec.PID, dir: dir, pidfd: pidfd, rec: rec, done: make(chan struct{})}
	go p.watchAdopted()
	return p, nil
}

// watchAdopted waits for an adopted process to exit: it is not our child
// and so cannot be waited for. Its pidfd becomes readable when it exits;
// without one, its stat is looked at five times a second.
func (p *vmProc) watchAdopted() {
	if p.pidfd == nil || waitPidfd(p.pidfd) != nil {
		for p.stillRecorded() {
			time.Sleep(200 * time.Millisecond)
		}
	}
	p.exit(errAdoptedExited)
}

// stillRecorded reports whether p's pid is still the recorded process.
func (p *vmProc) stillRecorded() bool {
	if p.pidfd != nil {
		return !pidfdReady(p.pidfd)
	}
	st, err := procStartTime(p.pid)
	return err == nil && st == p.rec.StartTime
}

// signal sends sig to the process: through its pidfd when adopted, so it
// cannot reach a process that reused the pid.
func (p *vmProc) signal(sig syscall.Signal) {
	switch {
	case p.cmd != nil:
		p.cmd.Process.Signal(sig)
	case p.pidfd != nil:
		rc, err := p.pidfd.SyscallConn()
		if err == nil {
			rc.Control(func(fd uintptr) { unix.PidfdSendSignal(int(fd), sig, nil, 0) })
		}
	case p.stillRecorded():
		syscall.Kill(p.pid, sig)
	}
}

// kill kills the process, and with it everything in its cgroup: the one
// kill that a VMM that forked, or a process that slipped its pid, cannot
// outlive.
func (p *vmProc) kill() {
	p.signal(syscall.SIGKILL)
	if p.rec.Cgroup != "" {
		jail.CgroupAt(p.rec.Cgroup).Kill()
	}
}

// alive reports whether the process still runs.
func (p *vmProc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop asks the VMM to end the VM (SIGTERM), then kills it after grace.
func (p *vmProc) stop(grace time.Duration) {
	if !p.alive() {
		return
	}
	p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill()
		<-p.done
	}
}

// consoleTail returns the last n bytes of the VM's console, for errors.
func consoleTail(dir string, n int64) string {
	return readTail(filepath.Join(dir, consoleFile), n)
}
