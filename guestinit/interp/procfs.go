package interp

import (
	"bytes"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// procInfo is what /proc/<pid>/stat says about one process.
type procInfo struct {
	pid, ppid, pgrp int
	state           byte // 'Z' for a zombie
}

// readProcStat parses /proc/<pid>/stat. The command name may hold spaces
// and parentheses, so fields are counted from the last ')'.
func readProcStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return procInfo{}, false
	}
	f := bytes.Fields(b[i+2:])
	if len(f) < 3 || len(f[0]) != 1 {
		return procInfo{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return procInfo{}, false
	}
	return procInfo{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}

// listProcs reads every process in /proc.
func listProcs() []procInfo {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make([]procInfo, 0, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		if p, ok := readProcStat(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// strayProcs returns the processes (zombies included, which need reaping)
// that belong to the interpreter root: its descendants, members of its process group, and the
// pids in extra (its cgroup), without root itself.
func strayProcs(root int, extra []int) []int {
	procs := listProcs()
	children := make(map[int][]int, len(procs))
	byPid := make(map[int]procInfo, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
		byPid[p.pid] = p
	}
	found := map[int]bool{}
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			if !found[c] {
				found[c] = true
				queue = append(queue, c)
			}
		}
	}
	for _, p := range procs {
		if p.pgrp == root {
			found[p.pid] = true
		}
	}
	for _, pid := range extra {
		found[pid] = true
	}
	delete(found, root)
	out := make([]int, 0, len(found))
	for pid := range found {
		if _, ok := byPid[pid]; ok {
			out = append(out, pid)
		}
	}
	return out
}

// procAlive reports whether pid exists and is not a zombie.
func procAlive(pid int) bool {
	p, ok := readProcStat(pid)
	return ok && p.state != 'Z'
}

// reapOrphans collects the exit status of those pids that were re-parented
// to this process (it is PID 1, or a child subreaper) after their parent
// died, waiting up to wait for them to exit. It never waits for a pid that
// is not its child, so it cannot steal os/exec's children.
func reapOrphans(pids []int, wait time.Duration) {
	self := os.Getpid()
	deadline := time.Now().Add(wait)
	pending := append([]int(nil), pids...)
	for len(pending) > 0 {
		next := pending[:0]
		for _, pid := range pending {
			p, ok := readProcStat(pid)
			if !ok || p.ppid != self {
				continue // gone, or someone else's to reap
			}
			var ws unix.WaitStatus
			got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
			if err == nil && got == 0 {
				next = append(next, pid) // still running
			}
		}
		pending = next
		if len(pending) == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
