package interp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
)

// ErrClosed is returned by calls on a closed Interp.
var ErrClosed = errors.New("interpreter closed")

// Interp is a persistent Python interpreter and its supervisor. Run,
// Restart and Close may be called from any goroutine; cells run one at a
// time. Interrupt may be called at any time.
type Interp struct {
	cfg        Config
	rt         *runtime
	log        *slog.Logger
	runDir     string
	ownRunDir  bool
	driverPath string
	cells      *cgroup // all user code: the budget
	cg         *cgroup // the interpreter, inside cells
	// sharedCells: cells is another Interp's (Config.CellsFrom), which
	// removes it.
	sharedCells bool

	// wakeFD is an eventfd that wakes a running cell's poll loop (on an
	// interrupt, a cancelled context, or the interpreter's exit).
	wakeMu sync.RWMutex
	wakeFD int

	// runMu serializes cells, restarts and Close; it guards the fields
	// below it.
	runMu     sync.Mutex
	p         *proc
	count     int
	lostQuiet bool // the last interpreter died between cells, unreported

	extraEnv atomic.Pointer[[]string] // SetEnv's variables, "NAME=value"
	cur      atomic.Pointer[proc]     // p, for Interrupt and Restart
	// running is the cell Run is running, nil between cells: Interrupt,
	// Restart and Close ask things of it (cellRun.ask).
	running atomic.Pointer[cellRun]
	// closed is set once, by Close: the Interp's end, not a cell's.
	closed atomic.Bool
}

// New prepares an interpreter; the python process starts with the first
// cell (or Restart).
func New(cfg Config) (*Interp, error) {
	cfg = cfg.withDefaults()
	rt, err := lookupRuntime(cfg.Runtime)
	if err != nil {
		return nil, err
	}
	if cfg.Python == "" || rt != pythonRuntime {
		// Config.Python is Python's: another runtime's program is looked
		// up by its name on the cells' PATH, whatever the agent's flags.
		cfg.Python = rt.program
	}
	in := &Interp{cfg: cfg, rt: rt, log: cfg.Logger, runDir: cfg.RunDir}
	if in.runDir == "" {
		d, err := os.MkdirTemp("", "cellvm-interp-")
		if err != nil {
			return nil, fmt.Errorf("create run dir: %w", err)
		}
		in.runDir, in.ownRunDir = d, true
		if err := os.Chmod(d, 0o755); err != nil { // a Launcher's user reads the driver
			in.cleanupDirs()
			return nil, fmt.Errorf("create run dir: %w", err)
		}
	}
	for name, b := range in.rt.files {
		if err := os.WriteFile(filepath.Join(in.runDir, name), b, 0o644); err != nil {
			in.cleanupDirs()
			return nil, fmt.Errorf("write the %s driver: %w", in.rt.name, err)
		}
	}
	in.driverPath = filepath.Join(in.runDir, in.rt.driver)
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		in.cleanupDirs()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	in.wakeFD = fd
	if cfg.CellsFrom != nil && cfg.CellsFrom.cells != nil {
		in.cells, in.sharedCells = cfg.CellsFrom.cells, true
		if in.cg, err = newCgroup(in.cells.dir, "interp-", 0, 0); err != nil {
			unix.Close(fd)
			in.cleanupDirs()
			return nil, err
		}
	} else if cfg.CellsFrom == nil && cfg.CgroupParent != "" {
		cells, err := newCgroup(cfg.CgroupParent, "cells-", cfg.MemoryMax, cfg.PidsMax)
		if err == nil {
			in.cells = cells
			in.cg, err = newCgroup(cells.dir, "interp-", 0, 0)
		}
		if err != nil {
			if in.cells != nil {
				in.cells.remove()
			}
			unix.Close(fd)
			in.cleanupDirs()
			return nil, err
		}
	}
	return in, nil
}

func (in *Interp) cleanupDirs() {
	if in.ownRunDir {
		os.RemoveAll(in.runDir)
	}
}

// wakeUp wakes a running cell's poll loop.
func (in *Interp) wakeUp() {
	in.wakeMu.RLock()
	defer in.wakeMu.RUnlock()
	if in.wakeFD >= 0 {
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		_, _ = unix.Write(in.wakeFD, one[:])
	}
}

func (in *Interp) clearWake() {
	var b [8]byte
	_, _ = unix.Read(in.wakeFD, b[:])
}

// Interrupt sends SIGINT to the running cell, which then ends with a
// KeyboardInterrupt error and its state kept; a cell that ignores it is
// killed after the grace period. It reports whether a cell was running.
func (in *Interp) Interrupt() bool {
	r := in.running.Load()
	if r == nil {
		return false
	}
	r.ask(askInterrupt)
	in.wakeUp()
	return true
}

// Restart kills the interpreter (and a running cell, which ends "lost")
// and starts a fresh one.
func (in *Interp) Restart() error {
	if in.closed.Load() {
		return ErrClosed
	}
	in.killCurrent()
	in.runMu.Lock()
	defer in.runMu.Unlock()
	if in.closed.Load() {
		return ErrClosed
	}
	in.stopLocked()
	in.lostQuiet = false // the caller asked for it: not a surprise loss
	return in.ensureStartedLocked()
}

// Close kills the interpreter and everything it started and removes its
// files and cgroup.
func (in *Interp) Close() error {
	if in.closed.Swap(true) {
		return nil
	}
	in.killCurrent()
	in.runMu.Lock()
	defer in.runMu.Unlock()
	in.stopLocked()
	var err error
	if in.cg != nil {
		err = in.cg.remove()
		if !in.sharedCells {
			err = errors.Join(err, in.cells.remove())
		}
	}
	in.wakeMu.Lock()
	unix.Close(in.wakeFD)
	in.wakeFD = -1
	in.wakeMu.Unlock()
	in.cleanupDirs()
	return err
}

// killCurrent kills the current interpreter's process group without
// waiting for a running cell to notice.
func (in *Interp) killCurrent() {
	if p := in.cur.Load(); p != nil {
		if r := in.running.Load(); r != nil {
			r.ask(askKill)
		}
		p.killAll(in.cg)
		in.wakeUp()
	}
}

// stopLocked terminates the current interpreter, if any. Caller holds runMu.
func (in *Interp) stopLocked() *os.ProcessState {
	p := in.p
	if p == nil {
		return nil
	}
	in.p = nil
	in.cur.Store(nil)
	return p.terminate(in.cg)
}

// ensureStartedLocked starts an interpreter if none runs and waits for its
// ready frame. Caller holds runMu.
func (in *Interp) ensureStartedLocked() error {
	if in.p != nil && in.p.exited.Load() {
		st := in.stopLocked()
		_, how := describeExit(st)
		in.log.Warn("interpreter died between cells", "how", how)
		in.lostQuiet = true
	}
	if in.p != nil {
		return nil
	}
	p, err := in.startProc()
	if err == nil {
		if err = in.awaitReady(p); err != nil {
			p.terminate(in.cg)
		}
	}
	if err != nil {
		var pe *PythonError
		if errors.As(err, &pe) {
			pe.Runtime = in.rt.name
		}
		return err
	}
	in.p = p
	in.cur.Store(p)
	return nil
}

// awaitReady waits for the driver's ready frame, keeping what the
// interpreter writes meanwhile to explain a failed start.
func (in *Interp) awaitReady(p *proc) error {
	deadline := time.Now().Add(in.cfg.StartTimeout)
	early := cell.NewClipper(4<<10, 4<<10)
	buf := make([]byte, 4<<10)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("interpreter did not start within %v", in.cfg.StartTimeout)
		}
		pfds := []unix.PollFd{
			{Fd: int32(p.evFD), Events: unix.POLLIN},
			{Fd: int32(p.outFD), Events: unix.POLLIN},
			{Fd: int32(p.errFD), Events: unix.POLLIN},
			{Fd: int32(in.wakeFD), Events: unix.POLLIN},
		}
		if _, err := unix.Poll(pfds, int(min(left, time.Second)/time.Millisecond)+1); err != nil && err != unix.EINTR {
			return fmt.Errorf("poll: %w", err)
		}
		drainInto(p.outFD, early, buf)
		drainInto(p.errFD, early, buf)
		if pfds[3].Revents != 0 {
			in.clearWake()
		}
		err := p.ev.fill()
		for {
			f, ok, ferr := p.ev.next()
			if ferr != nil {
				return fmt.Errorf("interpreter start: %w", ferr)
			}
			if !ok {
				break
			}
			switch f.Ev {
			case "ready":
				in.log.Debug("interpreter ready", "pid", p.pid, "python", p.python, "version", f.Version)
				return nil
			case "unsupported": // older than MinPython; it exits
				return &PythonError{Python: in.cfg.Python, Found: p.python, Version: f.Version}
			}
		}
		if err != nil || p.exited.Load() {
			drainInto(p.outFD, early, buf)
			drainInto(p.errFD, early, buf)
			text, _ := early.Text()
			return fmt.Errorf("interpreter exited during start-up: %s", text)
		}
	}
}

// drainInto reads a non-blocking fd into w until it is empty, or at most
// 1 MiB: more than a pipe holds, so everything written before the call is
// taken, while a process that keeps writing cannot hold the caller.
func drainInto(fd int, w io.Writer, buf []byte) {
	for range 1 + (1<<20)/len(buf) {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			w.Write(buf[:n])
			continue
		}
		if err == unix.EINTR {
			continue
		}
		return
	}
}

// send writes one command to the driver.
func (p *proc) send(c command) error {
	b, err := p.rt.encode(c)
	if err != nil {
		return err
	}
	if err := p.ctl.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return fmt.Errorf("command pipe: %w", err)
	}
	if _, err := p.ctl.Write(b); err != nil {
		return fmt.Errorf("send command: %w", err)
	}
	return nil
}
