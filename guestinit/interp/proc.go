package interp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Fd numbers of the protocol pipes in the interpreter (after 0, 1, 2).
const (
	childCtlFD = 3
	childEvFD  = 4
)

// proc is one running interpreter process and the host ends of its pipes.
type proc struct {
	cmd *exec.Cmd
	pid int
	// python is the interpreter's binary; rt its runtime.
	python string
	rt     *runtime
	// ctl is the write end of the command pipe (pollable, so writes can
	// time out). outFD, errFD and evFD are non-blocking read ends of the
	// interpreter's fd 1, fd 2 and event pipe, read with poll(2).
	ctl                *os.File
	outFD, errFD, evFD int
	ev                 *frameReader
	exitCh             chan struct{} // closed once the process has exited (not yet reaped)
	exited             atomic.Bool

	// mu guards reaped; signals are only sent while the process is not yet
	// reaped, so its pid (and process group id) cannot have been reused.
	mu     sync.Mutex
	reaped bool
	state  *os.ProcessState
	strays []int // processes killed with the interpreter
}

// startProc starts the interpreter. wake is called once when it exits.
func (in *Interp) startProc() (*proc, error) {
	env := append(in.baseEnv(), in.rt.env(in)...)
	python, err := findPython(in.cfg.Python, env)
	if err != nil {
		return nil, err
	}
	var fds []int // host-side fds to close on failure
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	pipe := func() (r, w int, err error) {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return -1, -1, fmt.Errorf("pipe: %w", err)
		}
		fds = append(fds, p[0], p[1])
		return p[0], p[1], nil
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	evR, evW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, fd := range []int{outR, errR, evR} {
		if err := unix.SetNonblock(fd, true); err != nil {
			closeAll()
			return nil, fmt.Errorf("set non-blocking: %w", err)
		}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("pipe: %w", err)
	}

	argv := append(in.cfg.Launcher[:len(in.cfg.Launcher):len(in.cfg.Launcher)], python)
	argv = append(argv, in.rt.argv(in.driverPath)...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = in.cfg.Dir
	cmd.Env = env
	outWF, errWF, evWF := os.NewFile(uintptr(outW), "stdout"), os.NewFile(uintptr(errW), "stderr"), os.NewFile(uintptr(evW), "events")
	cmd.Stdout, cmd.Stderr = outWF, errWF // stdin stays nil: /dev/null
	cmd.ExtraFiles = []*os.File{ctlR, evWF}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The interpreter leads its own process group, so one kill reaches
		// everything a cell started that did not leave the group.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if in.cg != nil {
		cgfd, err := in.cg.openFD()
		if err != nil {
			ctlR.Close()
			ctlW.Close()
			closeAll()
			return nil, err
		}
		defer unix.Close(cgfd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = cgfd
	}
	err = cmd.Start()
	// The child has its copies now (or never will).
	ctlR.Close()
	outWF.Close()
	errWF.Close()
	evWF.Close()
	fds = []int{outR, errR, evR}
	if err != nil {
		ctlW.Close()
		closeAll()
		return nil, fmt.Errorf("start %s: %w", python, err)
	}
	p := &proc{
		cmd:    cmd,
		pid:    cmd.Process.Pid,
		python: python,
		rt:     in.rt,
		ctl:    ctlW,
		outFD:  outR,
		errFD:  errR,
		evFD:   evR,
		ev:     newFrameReader(evR, in.cfg.MaxFrameBytes),
		exitCh: make(chan struct{}),
	}
	go p.watchExit(in.wakeUp)
	return p, nil
}

// pythonEnv is what Python's driver relies on in its environment.
func (in *Interp) pythonEnv() []string {
	env := []string{
		"MPLBACKEND=Agg",
		"PYTHONUNBUFFERED=1",
		"PYTHONIOENCODING=utf-8",
		"PYTHONFAULTHANDLER=1",
		"NO_COLOR=1",
		"PYTHON_COLORS=0",
		"TERM=dumb",
		// A text result (a long repr) is clipped like an output stream.
		"CELLVM_MAX_TEXT=" + strconv.Itoa(max(in.cfg.HeadBytes+in.cfg.TailBytes, 4096)),
	}
	if in.cfg.AddressSpaceLimit > 0 {
		env = append(env, "CELLVM_RLIMIT_AS="+strconv.FormatInt(in.cfg.AddressSpaceLimit, 10))
	}
	return env
}

// watchExit waits, without reaping, for the process to exit, so that the
// pid stays reserved until terminate reaps it.
func (p *proc) watchExit(wake func()) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, p.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil || !errors.Is(err, unix.EINTR) {
			break
		}
	}
	p.exited.Store(true)
	wake()
	close(p.exitCh)
}

// signal sends sig to the interpreter alone.
func (p *proc) signal(sig unix.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = unix.Kill(p.pid, sig)
	}
}

// interrupt sends SIGINT to the interpreter, or with its runtime's
// signalGroup to its process group.
func (p *proc) interrupt() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return
	}
	if p.rt.signalGroup {
		_ = unix.Kill(-p.pid, unix.SIGINT)
	} else {
		_ = unix.Kill(p.pid, unix.SIGINT)
	}
}

// killGroup sends SIGKILL to the interpreter's process group.
func (p *proc) killGroup() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		_ = unix.Kill(-p.pid, unix.SIGKILL)
	}
}

// killAll kills the interpreter, its process group, its descendants and
// (with a cgroup) everything in its cgroup. Descendants are found before
// the interpreter dies, while their parent links still lead to it, and are
// remembered so that terminate can reap those re-parented to us.
func (p *proc) killAll(cg *cgroup) {
	var extra []int
	if cg != nil {
		extra = cg.procs()
	}
	strays := strayProcs(p.pid, extra)
	p.killGroup()
	for _, pid := range strays {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	if cg != nil {
		cg.killAll()
	}
	p.mu.Lock()
	p.strays = append(p.strays, strays...)
	p.mu.Unlock()
}

// terminate kills the interpreter and everything it started, reaps it, and
// closes the host ends of its pipes. It returns how the process ended.
func (p *proc) terminate(cg *cgroup) *os.ProcessState {
	p.killAll(cg)
	<-p.exitCh
	p.mu.Lock()
	if !p.reaped {
		p.reaped = true
		_ = p.cmd.Wait() // an exit status is not an error here
		p.state = p.cmd.ProcessState
	}
	p.mu.Unlock()
	// Children the cell started were re-parented to us if we are PID 1 or
	// a subreaper; collect them so they do not stay zombies.
	p.mu.Lock()
	strays := p.strays
	p.mu.Unlock()
	reapOrphans(strays, time.Second)
	p.ctl.Close()
	for _, fd := range []int{p.outFD, p.errFD, p.evFD} {
		unix.Close(fd)
	}
	return p.state
}

// describeExit says in words how the process ended.
func describeExit(st *os.ProcessState) (signaled bool, text string) {
	if st == nil {
		return false, "ended"
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return true, "was killed by signal " + ws.Signal().String()
	}
	return false, "exited with code " + strconv.Itoa(st.ExitCode())
}
