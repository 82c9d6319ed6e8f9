package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/control"
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
}

// vmProc is a running `cellvm vmm` process. It runs in its own session so
// that it outlives a daemon crash (a restarted daemon takes it back), and a
// signal to the daemon's process group does not reach it.
type vmProc struct {
	pid  int
	dir  string
	cmd  *exec.Cmd // nil when adopted from an earlier daemon
	done chan struct{}
	err  error // valid after done
	// ended says the daemon ended the process on purpose, keeping the VM
	// (a pause to disk): its exit does not make the sandbox lost.
	ended atomic.Bool
	// exitSeen is markLost's: the process's own exit is handled once.
	exitSeen sync.Once
}

const (
	specFile    = "vmm.json"
	configFile  = "sandbox.json"
	pidFile     = "vmm.pid"
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
// until its guest's agent answers (awaitAgent), within m's boot timeout.
// It is the one way a sandbox's VM starts: booted or restored from a
// snapshot or template (launch, a fork), or from its paused image
// (resume). what says what the VM was doing, for the error of one that
// exits first ("booting", "resuming"). A process whose agent never
// answers is stopped before startVMM returns its error. st.files are
// closed: the process has its own descriptors.
func (m *VMManager) startVMM(ctx context.Context, dir string, st vmStart, what string) (*vmProc, *agentclient.Client, error) {
	p, err := spawnVMM(m.opt.Exe, dir, st)
	if err != nil {
		return nil, nil, err
	}
	if st.spawned != nil {
		st.spawned(p)
	}
	c, err := awaitAgent(ctx, p, dir, m.opt.BootTimeout, what)
	if err != nil {
		p.ended.Store(true)
		p.stop(5 * time.Second)
		return nil, nil, err
	}
	return p, c, nil
}

// spawnVMM writes st's spec into dir and starts exe (the cellvm binary) as
// its VMM process, the files in their slots and a fresh End report file
// in control.SlotEnd.
func spawnVMM(exe, dir string, st vmStart) (*vmProc, error) {
	defer st.files.Close()
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
	cmd := exec.Command(exe, control.Args(cfg)...)
	cmd.Stdout, cmd.Stderr = console, logf
	cmd.ExtraFiles = extra
	// The Go runtime's periodic look at its cgroup's CPU limit would only
	// meet the jail's seccomp filter (EACCES).
	cmd.Env = append(os.Environ(), "GODEBUG=updatemaxprocs=0")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: 0}
	if st.spec.Jail != nil {
		cmd.SysProcAttr.Cloneflags = jail.Cloneflags
	}
	if st.cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = st.cgroup.FD()
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start vmm process: %w", err)
	}
	p := &vmProc{pid: cmd.Process.Pid, dir: dir, cmd: cmd, done: make(chan struct{})}
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(p.pid)), 0o600); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// awaitAgent waits until the agent of the VM of process p (the sandbox in
// dir) answers, for at most timeout, or p exits first: the one way the
// daemon waits for a guest, whether it started the VMM (startVMM) or took
// it back from an earlier daemon (recover). The error of a VM that exited
// says why (its End report with its exit status: lostInfo) and quotes the
// ends of its VMM log and console for a human.
func awaitAgent(ctx context.Context, p *vmProc, dir string, timeout time.Duration, what string) (*agentclient.Client, error) {
	waitCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type dialed struct {
		c   *agentclient.Client
		err error
	}
	ready := make(chan dialed, 1)
	go func() {
		c, err := agentclient.Dial(waitCtx, hostVsockPath(dir))
		ready <- dialed{c, err}
	}()
	select {
	case d := <-ready:
		if d.err != nil && ctx.Err() == nil && waitCtx.Err() != nil {
			return nil, fmt.Errorf("guest agent did not answer within %v: %w; vmm log: %s; console: %s", timeout, d.err,
				lastLines(readTail(filepath.Join(dir, vmmLogFile), 2048), 5), lastLines(consoleTail(dir, 4096), 15))
		}
		return d.c, d.err
	case <-p.done:
		cancel()
		if d := <-ready; d.c != nil {
			d.c.Close()
		}
		why := p.lostInfo()
		return nil, fmt.Errorf("the VM exited while %s (%s; %s); vmm log: %s; console: %s", what, why.Exit, why.Reason,
			lastLines(readTail(filepath.Join(dir, vmmLogFile), 8192), 12), lastLines(consoleTail(dir, 4096), 15))
	}
}

// adoptVM finds the VMM process an earlier daemon started for dir, if it is
// still alive and still that process.
func adoptVM(dir string) (*vmProc, error) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return nil, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return nil, fmt.Errorf("bad pid file in %s", dir)
	}
	if !isVMMFor(pid, filepath.Join(dir, specFile)) {
		return nil, fmt.Errorf("vmm process %d of %s is gone", pid, dir)
	}
	p := &vmProc{pid: pid, dir: dir, done: make(chan struct{})}
	go p.pollExit()
	return p, nil
}

// isVMMFor reports whether pid is the VMM process of the spec at cfg, by
// its command line (control.IsVMM).
func isVMMFor(pid int, cfg string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && control.IsVMM(b, cfg)
}

// pollExit watches an adopted process, which is not our child and so
// cannot be waited for.
func (p *vmProc) pollExit() {
	cfg := filepath.Join(p.dir, specFile)
	for isVMMFor(p.pid, cfg) {
		time.Sleep(200 * time.Millisecond)
	}
	p.err = errAdoptedExited
	close(p.done)
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
	syscall.Kill(p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		syscall.Kill(p.pid, syscall.SIGKILL)
		<-p.done
	}
}

// consoleTail returns the last n bytes of the VM's console, for errors.
func consoleTail(dir string, n int64) string {
	return readTail(filepath.Join(dir, consoleFile), n)
}
