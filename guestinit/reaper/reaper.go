// Package reaper collects the exit status of every child of the process
// that runs it: PID 1 in the guest, or a child subreaper.
//
// Orphans are re-parented to PID 1, which must wait for them or they stay
// zombies forever. But wait4(-1) also takes the status of children that
// someone else is about to wait for, so a process that reaps everything
// must not also use os/exec (whose Wait would then fail with ECHILD) or
// waitid on its children. The Reaper is therefore the only thing in its
// process that waits: children are started through Start, which registers
// the child before the reaper can see its exit (both hold the same lock),
// and their statuses are delivered on a channel; everything else is an
// orphan and is reaped and counted.
//
// This is why the guest runs the agent (which uses os/exec through the
// interpreter supervisor) as a child of PID 1 rather than inside it: PID 1
// starts only the agent, through a Reaper, and reaps the rest.
package reaper

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Exit is how a registered child ended.
type Exit struct {
	Pid    int
	Status unix.WaitStatus
}

// Code is the exit code, or 128+signal for a child killed by a signal.
func (e Exit) Code() int {
	if e.Status.Signaled() {
		return 128 + int(e.Status.Signal())
	}
	return e.Status.ExitStatus()
}

func (e Exit) String() string {
	if e.Status.Signaled() {
		return fmt.Sprintf("pid %d killed by %v", e.Pid, e.Status.Signal())
	}
	return fmt.Sprintf("pid %d exited with code %d", e.Pid, e.Status.ExitStatus())
}

// Reaper waits for every child of its process. Its zero value is not
// usable; call New.
type Reaper struct {
	log *slog.Logger

	mu      sync.Mutex
	waiters map[int]chan Exit
	orphans int64
}

// New returns a Reaper. Call Run (or Reap) to collect exits.
func New(log *slog.Logger) *Reaper {
	if log == nil {
		log = slog.Default()
	}
	return &Reaper{log: log, waiters: map[int]chan Exit{}}
}

// Start starts a child like os.StartProcess and returns its pid and a
// channel that receives its exit once. The child must not be waited for
// by any other means (do not call Wait on a process from os.FindProcess).
func (r *Reaper) Start(name string, argv []string, attr *os.ProcAttr) (int, <-chan Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(name, argv, attr)
	if err != nil {
		return 0, nil, fmt.Errorf("start %s: %w", name, err)
	}
	pid := p.Pid
	// Drop os.Process's handle (a pidfd): the reaper collects the status.
	_ = p.Release()
	ch := make(chan Exit, 1)
	r.waiters[pid] = ch
	return pid, ch, nil
}

// Orphans is the number of unregistered children reaped so far.
func (r *Reaper) Orphans() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.orphans
}

// Reap collects every child that has exited, without blocking, delivers
// the statuses of registered children, and returns how many it reaped.
func (r *Reaper) Reap() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return n // ECHILD: no children; 0: none exited
		}
		n++
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- Exit{Pid: pid, Status: ws}
			continue
		}
		r.orphans++
		r.log.Debug("reaped orphan", "pid", pid, "status", Exit{Pid: pid, Status: ws}.String())
	}
}

// Run reaps on every SIGCHLD until ctx ends. It also reaps once a second
// in case the signal was lost to a race with signal.Notify's set-up.
func (r *Reaper) Run(ctx context.Context) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	defer signal.Stop(sigs)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	r.Reap()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
		case <-tick.C:
		}
		r.Reap()
	}
}

// HasChildren reports whether the process has any child left, running or
// not yet reaped; it reaps nothing.
func (r *Reaper) HasChildren() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return err != unix.ECHILD
}
