package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/jail"
)

// A VMM process is found again after a daemon restart by what the daemon
// recorded when it started it and what the kernel says of the process,
// never by what the process says of itself: a compromised VMM can rewrite
// its argv (/proc/PID/cmdline is its own memory) to hide from a daemon
// that matched on it, and could claim a pid file's pid. It cannot change
// its start time (field 22 of /proc/PID/stat, fixed by the kernel at
// fork) nor leave its cgroup (a root-owned directory), so pid plus start
// time names one process for as long as the host runs, and cgroup
// membership confirms it is the one the daemon put there. Once found it
// is held by a pidfd, so a signal can never reach a process that reused
// its pid.

// procFile is a sandbox directory's procRecord of its VMM process.
const procFile = "vmm-proc.json"

// procRecord is what the daemon records of a VMM process it started.
type procRecord struct {
	PID int `json:"pid"`
	// StartTime is field 22 of /proc/PID/stat: clock ticks from boot to
	// the process's start.
	StartTime uint64 `json:"start_time"`
	// Cgroup is the host path of the cgroup it was cloned into ("" when
	// it has none).
	Cgroup string `json:"cgroup,omitempty"`
}

// maxProcRecord bounds the record read back: it is the daemon's own file,
// but a directory a jailed VMM shares (run/) is next door.
const maxProcRecord = 4096

// recordProc writes p's record into dir, atomically: a daemon that dies
// meanwhile leaves the old record or the new one, never half of one.
func recordProc(dir string, r procRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, procFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("record the vmm process: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, procFile)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("record the vmm process: %w", err)
	}
	return nil
}

// readProcRecord reads the record in dir, refusing one that is too long or
// names no real process (pid 0 or 1, no start time).
func readProcRecord(dir string) (procRecord, error) {
	var r procRecord
	f, err := os.Open(filepath.Join(dir, procFile))
	if err != nil {
		return r, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxProcRecord+1))
	if err != nil {
		return r, err
	}
	if len(b) > maxProcRecord {
		return r, fmt.Errorf("vmm process record in %s: longer than %d bytes", dir, maxProcRecord)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("vmm process record in %s: %w", dir, err)
	}
	if r.PID <= 1 || r.StartTime == 0 {
		return r, fmt.Errorf("vmm process record in %s: pid %d, start time %d", dir, r.PID, r.StartTime)
	}
	return r, nil
}

// procStartTime is the start time of process pid (field 22 of its stat).
func procStartTime(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statStartTime(b)
}

// statStartTime parses field 22 (starttime) of a /proc/PID/stat line. The
// second field, the command name in parentheses, is the process's to set
// (prctl PR_SET_NAME) and may hold spaces and parentheses itself, so the
// fields are counted from the last ')'.
func statStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("proc stat: no command name")
	}
	// After ") " come fields 3 (state) onwards: starttime is the 20th.
	fields := bytes.Fields(stat[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want at least 20", len(fields))
	}
	t, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil || t == 0 {
		return 0, fmt.Errorf("proc stat: start time %q", fields[19])
	}
	return t, nil
}

// errNotRecorded says a pid is not (or no longer) the process a record
// names.
var errNotRecorded = errors.New("not the recorded process")

// findRecorded returns a handle on the process r names if it still runs
// and is that process: its start time is r's, and it is in r's cgroup
// when r has one. The handle is a pidfd (nil on a kernel without
// pidfd_open, Linux 5.3), opened before the checks, so that it holds the
// process the checks saw.
func findRecorded(r procRecord) (*os.File, error) {
	var pidfd *os.File
	fd, err := unix.PidfdOpen(r.PID, unix.PIDFD_NONBLOCK)
	switch {
	case err == nil:
		pidfd = os.NewFile(uintptr(fd), fmt.Sprintf("pidfd:%d", r.PID))
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("vmm process %d: %w (it is gone)", r.PID, errNotRecorded)
	case !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL):
		return nil, fmt.Errorf("vmm process %d: pidfd: %w", r.PID, err)
	}
	fail := func(err error) (*os.File, error) {
		if pidfd != nil {
			pidfd.Close()
		}
		return nil, err
	}
	st, err := procStartTime(r.PID)
	if err != nil {
		return fail(fmt.Errorf("vmm process %d: %w (%v)", r.PID, errNotRecorded, err))
	}
	if st != r.StartTime {
		return fail(fmt.Errorf("vmm process %d: %w: it started at tick %d, the record says %d (its pid was reused)", r.PID, errNotRecorded, st, r.StartTime))
	}
	if r.Cgroup != "" {
		pids, err := jail.CgroupPids(r.Cgroup)
		if err != nil || !slices.Contains(pids, r.PID) {
			return fail(fmt.Errorf("vmm process %d: %w: not in its cgroup %s (%v)", r.PID, errNotRecorded, r.Cgroup, err))
		}
	}
	if pidfd != nil && pidfdReady(pidfd) {
		return fail(fmt.Errorf("vmm process %d: %w (it exited while being checked)", r.PID, errNotRecorded))
	}
	return pidfd, nil
}

// pidfdReady reports whether the process of pidfd has exited (a pidfd is
// readable once it has), without waiting.
func pidfdReady(pidfd *os.File) bool {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	rc.Control(func(fd uintptr) { ready = pollIn(fd) })
	return ready
}

func pollIn(fd uintptr) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// waitPidfd waits until the process of pidfd exits, in the runtime's
// poller (no thread held per adopted VMM). It returns an error when the
// descriptor cannot be waited on that way; the caller then polls.
func waitPidfd(pidfd *os.File) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Read(func(fd uintptr) bool { return pollIn(fd) })
}

// killUnrecorded kills the VMM a daemon started for dir but died before
// recording (its procRecord is written just after the start), and
// returns the pids it killed. Such a process is found by its stdout,
// which is dir's console log (spawnVMM): a descriptor the daemon set up,
// not a word of the process's, and one it still holds, since in that
// window it has not yet run a guest instruction. A jailed one is in its
// cgroup as well, which recover kills in any case; this finds an unjailed
// one. It reads every process's descriptor 1, so recover calls it only
// for a sandbox that has a spec and no record.
func killUnrecorded(dir string) []int {
	console := filepath.Join(dir, consoleFile)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var killed []int
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if target, err := os.Readlink(filepath.Join(p, "fd", "1")); err != nil || target != console {
			continue
		}
		// Held by a pidfd, and checked again through it, so the kill
		// cannot reach a process that took the pid meanwhile.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			if errors.Is(err, unix.ENOSYS) {
				unix.Kill(pid, unix.SIGKILL)
				killed = append(killed, pid)
			}
			continue
		}
		if target, err := os.Readlink(filepath.Join(p, "fd", "1")); err == nil && target == console && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
			killed = append(killed, pid)
		}
		unix.Close(fd)
	}
	return killed
}
