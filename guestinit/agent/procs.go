package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// Background processes (proto.OpProc): commands that outlive the
// connection that started them. The agent keeps a table of them; each
// has a bounded backlog of its latest output (for a host that attaches
// later) and any number of watchers (the connections streaming it). A
// watcher that falls too far behind is dropped, never the process slowed:
// a host that stops reading must not stall a guest's server.
//
// A process runs through the same launcher as commands (the drop step:
// the cells' user, or root), in a cgroup of its own inside the cells'
// one, in its own process group (a session, with a terminal). When it
// exits, whatever it left behind in its cgroup or group is killed, as for
// commands.

// ProcSpec says how background processes start. The zero value runs them
// as the agent does, in its environment and directory, without cgroups
// (tests on a host).
type ProcSpec struct {
	// Launcher returns what goes before a process's command line: the
	// drop step for the cells' user, or for root when root is set. Nil:
	// nothing.
	Launcher func(root bool) []string
	// Env returns the environment processes start with (the sandbox's).
	// Nil: the agent's.
	Env func() []string
	// Dir is the working directory when the request names none and the
	// environment's HOME is not a directory. "": the agent's.
	Dir string
	// Cgroup returns the cells' cgroup directory; "" or nil: no cgroups.
	Cgroup func() string
}

// procOutputWait is how long a process's output streams may stay open
// after it exits (a child it left in the background holding them).
const procOutputWait = time.Second

// inputWait bounds one write to a process's stdin or terminal.
const inputWait = 10 * time.Second

// watcherQueue bounds what one watcher may have queued, in bytes.
const watcherQueue = 4 << 20

// backlogEvents bounds the backlog's events (output of many tiny writes
// of alternating streams).
const backlogEvents = 4096

var (
	errProcFull    = fmt.Errorf("the sandbox runs %d processes already", proto.MaxProcs)
	errProcGone    = errors.New("no such process")
	errProcNoInput = errors.New("the process was started without stdin or a terminal")
	errProcNoPTY   = errors.New("the process has no terminal")
	errLagged      = errors.New("the stream fell behind the process's output and was dropped")
)

type procTable struct {
	spec ProcSpec
	log  *slog.Logger

	mu    sync.Mutex
	procs map[int]*gproc
	seq   int
}

func newProcTable(spec ProcSpec, log *slog.Logger) *procTable {
	return &procTable{spec: spec, log: log, procs: map[int]*gproc{}}
}

// gproc is one background process.
type gproc struct {
	t     *procTable
	info  proto.ProcInfo
	cmd   *exec.Cmd
	pty   *os.File // the terminal's master, or nil
	stdin *os.File // the stdin pipe's write end, or nil
	outs  []*os.File
	cg    string // its cgroup directory, or ""

	inMu     sync.Mutex // one input at a time
	timedOut atomic.Bool

	mu       sync.Mutex
	backlog  []proto.ProcEvent
	backSize int
	watchers map[*procWatcher]struct{}
	ended    bool
	exit     proto.ProcExit
}

// watcher is one stream's queue of a process's events.
type procWatcher struct {
	wake chan struct{}

	mu     sync.Mutex
	q      []proto.ProcEvent
	size   int
	ended  bool
	lagged bool
	exit   proto.ProcExit
}

func newWatcher() *procWatcher { return &procWatcher{wake: make(chan struct{}, 1)} }

func (w *procWatcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// push queues e; it reports false when the watcher is past its bound.
func (w *procWatcher) push(e proto.ProcEvent) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.size+len(e.Data) > watcherQueue {
		w.lagged, w.ended = true, true
		w.q, w.size = nil, 0
		w.signal()
		return false
	}
	w.q, w.size = appendEvent(w.q, e), w.size+len(e.Data)
	w.signal()
	return true
}

func (w *procWatcher) end(exit proto.ProcExit) {
	w.mu.Lock()
	w.ended, w.exit = true, exit
	w.mu.Unlock()
	w.signal()
}

// take returns what is queued and whether the stream ended (and how).
func (w *procWatcher) take() (q []proto.ProcEvent, ended, lagged bool, exit proto.ProcExit) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q, w.q, w.size = w.q, nil, 0
	return q, w.ended, w.lagged, w.exit
}

// appendEvent appends e, merged into the last event when it is output of
// the same stream and both fit one chunk.
func appendEvent(q []proto.ProcEvent, e proto.ProcEvent) []proto.ProcEvent {
	if n := len(q); n > 0 && q[n-1].Kind == e.Kind && e.Kind != proto.ProcEventStart && len(q[n-1].Data)+len(e.Data) <= proto.MaxProcChunk {
		q[n-1].Data = append(q[n-1].Data, e.Data...)
		return q
	}
	e.Data = append([]byte(nil), e.Data...)
	return append(q, e)
}

// start starts req with w watching from its first byte. A program that
// cannot start is an exit with Error and a nil process; errProcFull and
// setup failures are errors.
func (t *procTable) start(req *proto.ProcRequest, w *procWatcher) (*gproc, *proto.ProcExit, error) {
	t.mu.Lock()
	if len(t.procs) >= proto.MaxProcs {
		t.mu.Unlock()
		return nil, nil, errProcFull
	}
	t.seq++
	seq := t.seq
	t.procs[-seq] = nil // holds the place while it starts
	t.mu.Unlock()
	release := func() {
		t.mu.Lock()
		delete(t.procs, -seq)
		t.mu.Unlock()
	}

	p := &gproc{t: t, watchers: map[*procWatcher]struct{}{w: {}}}
	cmd, cleanup, err := p.command(req, seq)
	if err != nil {
		release()
		return nil, &proto.ProcExit{ExitCode: -1, Error: err.Error()}, nil
	}
	err = cmd.Start()
	cleanup() // the child's ends of pipes and terminal, the cgroup fd
	if err != nil {
		p.closeFiles()
		p.removeCgroup()
		release()
		return nil, &proto.ProcExit{ExitCode: -1, Error: fmt.Sprintf("start %s: %v", req.Argv[0], err)}, nil
	}
	p.cmd = cmd
	p.info = proto.ProcInfo{PID: cmd.Process.Pid, Argv: proto.ClipArgv(req.Argv), Cwd: cmd.Dir, Tag: req.Tag, Root: req.Root,
		PTY: req.PTY != nil, StartedUnixMS: time.Now().UnixMilli()}
	for k := range req.Env {
		p.info.EnvNames = append(p.info.EnvNames, k)
	}
	sort.Strings(p.info.EnvNames)
	t.mu.Lock()
	delete(t.procs, -seq)
	t.procs[p.info.PID] = p
	t.mu.Unlock()

	var timer *time.Timer
	if req.TimeoutMS > 0 {
		timer = time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
			p.timedOut.Store(true)
			p.killAll()
		})
	}
	var pumps sync.WaitGroup
	for i, f := range p.outs {
		kind := proto.ProcEventStdout
		if p.pty != nil {
			kind = proto.ProcEventPTY
		} else if i == 1 {
			kind = proto.ProcEventStderr
		}
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			p.pump(f, kind)
		}()
	}
	go func() {
		st, _ := cmd.Process.Wait()
		if timer != nil {
			timer.Stop()
		}
		p.killAll() // what it left behind
		done := make(chan struct{})
		go func() { pumps.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(procOutputWait):
			for _, f := range p.outs {
				f.SetReadDeadline(time.Now())
			}
			<-done
		}
		p.closeFiles()
		p.removeCgroup()
		p.finish(exitOf(st, p.timedOut.Load()))
	}()
	return p, nil, nil
}

// command builds the process's command: its files are set on p, cleanup
// closes the child's copies once it started.
func (p *gproc) command(req *proto.ProcRequest, seq int) (_ *exec.Cmd, cleanup func(), err error) {
	spec := p.t.spec
	var child []*os.File
	cleanup = func() {
		for _, f := range child {
			f.Close()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
			p.closeFiles()
		}
	}()
	line := req.Argv
	if spec.Launcher != nil {
		pre := spec.Launcher(req.Root)
		line = append(pre[:len(pre):len(pre)], req.Argv...)
	}
	cmd := exec.Command(line[0], line[1:]...)
	env := os.Environ()
	if spec.Env != nil {
		env = spec.Env()
	}
	if req.Root {
		env = append(env, "HOME=/root", "USER=root", "LOGNAME=root")
	}
	for k, v := range req.Env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	cmd.Dir = req.Cwd
	if cmd.Dir == "" {
		cmd.Dir = homeDir(env, spec.Dir)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if req.PTY != nil {
		master, slave, err := openPTY(*req.PTY)
		if err != nil {
			return nil, cleanup, err
		}
		p.pty, p.outs = master, []*os.File{master}
		child = append(child, slave)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	} else {
		cmd.SysProcAttr.Setpgid = true
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, cleanup, err
			}
			p.outs = append(p.outs, r)
			child = append(child, w)
		}
		cmd.Stdout, cmd.Stderr = child[0], child[1]
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, cleanup, err
			}
			p.stdin = w
			child = append(child, r)
			cmd.Stdin = r
		}
	}
	if spec.Cgroup != nil {
		if parent := spec.Cgroup(); parent != "" {
			dir := filepath.Join(parent, "proc-"+strconv.Itoa(seq))
			if err := os.Mkdir(dir, 0o755); err != nil {
				return nil, cleanup, fmt.Errorf("cgroup for the process: %w", err)
			}
			p.cg = dir
			fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				p.removeCgroup()
				return nil, cleanup, fmt.Errorf("cgroup for the process: %w", err)
			}
			child = append(child, os.NewFile(uintptr(fd), dir))
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		}
	}
	return cmd, cleanup, nil
}

// homeDir is HOME from env when it is a directory, else dflt.
func homeDir(env []string, dflt string) string {
	home := ""
	for _, kv := range env {
		if len(kv) > 5 && kv[:5] == "HOME=" {
			home = kv[5:] // the last one wins, as in getenv
		}
	}
	if st, err := os.Stat(home); home != "" && err == nil && st.IsDir() {
		return home
	}
	return dflt
}

// pump reads one output stream until it ends.
func (p *gproc) pump(f *os.File, kind string) {
	buf := make([]byte, proto.MaxProcChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.emit(proto.ProcEvent{Kind: kind, Data: buf[:n]})
		}
		if err != nil {
			return // EOF, EIO (a terminal whose other side all closed), the deadline
		}
	}
}

// emit keeps e in the backlog and hands it to every watcher.
func (p *gproc) emit(e proto.ProcEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.backlog = appendEvent(p.backlog, e)
	p.backSize += len(e.Data)
	for p.backSize > proto.MaxProcBacklog || len(p.backlog) > backlogEvents {
		over := p.backSize - proto.MaxProcBacklog
		if first := &p.backlog[0]; over > 0 && over < len(first.Data) {
			first.Data = first.Data[over:]
			p.backSize -= over
			continue
		}
		p.backSize -= len(p.backlog[0].Data)
		p.backlog = p.backlog[1:]
	}
	for w := range p.watchers {
		if !w.push(e) {
			delete(p.watchers, w)
			p.t.log.Warn("agent: a process stream fell behind; dropped it", "pid", p.info.PID)
		}
	}
}

// attach adds a watcher that gets the backlog first.
func (p *gproc) attach() (*procWatcher, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil, false
	}
	w := newWatcher()
	for _, e := range p.backlog {
		w.push(e)
	}
	p.watchers[w] = struct{}{}
	return w, true
}

func (p *gproc) detach(w *procWatcher) {
	p.mu.Lock()
	delete(p.watchers, w)
	p.mu.Unlock()
}

// finish records the exit, ends every watcher and leaves the table.
func (p *gproc) finish(exit proto.ProcExit) {
	p.mu.Lock()
	p.ended, p.exit = true, exit
	for w := range p.watchers {
		w.end(exit)
	}
	p.watchers = nil
	p.mu.Unlock()
	p.t.mu.Lock()
	if p.t.procs[p.info.PID] == p {
		delete(p.t.procs, p.info.PID)
	}
	p.t.mu.Unlock()
}

func (p *gproc) closeFiles() {
	for _, f := range p.outs {
		f.Close()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// killAll kills the process's group and everything in its cgroup.
func (p *gproc) killAll() {
	if p.cmd != nil && p.cmd.Process != nil {
		_ = unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL)
	}
	if p.cg != "" {
		_ = os.WriteFile(filepath.Join(p.cg, "cgroup.kill"), []byte("1"), 0)
	}
}

func (p *gproc) removeCgroup() {
	if p.cg == "" {
		return
	}
	for i := 0; i < 50; i++ {
		if err := os.Remove(p.cg); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		_ = os.WriteFile(filepath.Join(p.cg, "cgroup.kill"), []byte("1"), 0)
		time.Sleep(20 * time.Millisecond)
	}
	p.t.log.Warn("agent: a process's cgroup would not go", "dir", p.cg)
}

// exitOf describes st as the host wants it.
func exitOf(st *os.ProcessState, timedOut bool) proto.ProcExit {
	e := proto.ProcExit{ExitCode: -1, TimedOut: timedOut}
	if st == nil {
		e.Error = "the process could not be waited for"
		return e
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
	case ws.Signaled():
		e.Signal = unix.SignalName(ws.Signal())
		if e.Signal == "" {
			e.Signal = "SIG" + strconv.Itoa(int(ws.Signal()))
		}
	default:
		e.ExitCode = ws.ExitStatus()
	}
	return e
}

func (t *procTable) get(pid int) (*gproc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.procs[pid]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: %d", errProcGone, pid)
}

func (t *procTable) list() []proto.ProcInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := []proto.ProcInfo{}
	for _, p := range t.procs {
		if p != nil {
			out = append(out, p.info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

var signals = map[string]unix.Signal{"SIGTERM": unix.SIGTERM, "SIGKILL": unix.SIGKILL, "SIGINT": unix.SIGINT, "SIGHUP": unix.SIGHUP}

func (p *gproc) signal(name string) error {
	sig, ok := signals[name]
	if !ok {
		return fmt.Errorf("signal %q is not one of SIGTERM, SIGKILL, SIGINT, SIGHUP", name)
	}
	if err := unix.Kill(-p.info.PID, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	if sig == unix.SIGKILL {
		p.killAll()
	}
	return nil
}

// input writes data to the process's stdin or terminal, then closes
// stdin (a terminal gets its end-of-file character) with eof.
func (p *gproc) input(data []byte, eof bool) error {
	f := p.stdin
	if p.pty != nil {
		f = p.pty
	}
	if f == nil {
		return errProcNoInput
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	f.SetWriteDeadline(time.Now().Add(inputWait))
	defer f.SetWriteDeadline(time.Time{})
	if eof && p.pty != nil {
		data = append(data[:len(data):len(data)], 4) // ^D
	}
	if _, err := f.Write(data); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("the process did not take its input within %v", inputWait)
		}
		if errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) {
			return fmt.Errorf("%w: its input is closed", errProcGone)
		}
		return err
	}
	if eof && p.pty == nil {
		return p.stdin.Close()
	}
	return nil
}
