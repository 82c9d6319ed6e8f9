package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/control"
	"golang.org/x/sys/unix"
)

// The pool's processes (vmmpool.go says why there is a pool): how one is
// started, and how a start claims it.

// poolProc is a pooled process's daemon side.
type poolProc struct {
	cmd *exec.Cmd
	// sock is the daemon's end of the claim socket; closing it without
	// a claim ends the process.
	sock *os.File
	// log is the file its stderr goes to until it is claimed.
	log string
}

// logTail is the end of the process's own log, for a message about one
// that died idle.
func (c *poolProc) logTail() string {
	if c == nil {
		return ""
	}
	return lastLines(readTail(c.log, 2048), 5)
}

// poolLogFile is where a claimed process's log from before its claim is
// kept in its sandbox's directory.
const poolLogFile = "vmm-pool.log"

// poolDir holds the idle pooled processes' logs.
func (m *VMManager) poolDir() string { return filepath.Join(m.opt.StateDir, "vmm-pool") }

// poolSeq numbers the logs of pooled processes without an id (a pool
// without cgroups).
var poolSeq atomic.Uint64

// legacyPoolCgroup is where a daemon of this state directory before
// 2026-12-05 kept its pool's idle processes, all in one cgroup.
func legacyPoolCgroup(parent, stateDir string) string {
	sum := sha256.Sum256([]byte(stateDir))
	return filepath.Join(parent, "pool-"+hex.EncodeToString(sum[:6]))
}

// newPool makes m's VMM pool (nil when Options.VMMPool is 0): its
// directory, and with the jail's cgroups the cgroups' parent, where each
// process gets a cgroup of its own (spawnPooled). What an earlier daemon
// of this state directory left of its pool is ended first (sweepPool).
func (m *VMManager) newPool() (*vmmPool, error) {
	if m.opt.VMMPool <= 0 {
		return nil, nil
	}
	pressure := "/proc/pressure/memory"
	named := false
	if j := m.opt.Jail; j != nil && j.CgroupParent != "" {
		if err := jail.PrepareCgroupParent(j.CgroupParent); err != nil {
			return nil, fmt.Errorf("vmm pool: %w", err)
		}
		for _, path := range sweepPool(m.poolDir(), j.CgroupParent, m.vmNames()) {
			m.log.Info("vmm pool: removed the cgroup of an idle process an earlier daemon left", "cgroup", path)
		}
		if err := jail.CgroupAt(legacyPoolCgroup(j.CgroupParent, m.opt.StateDir)).Close(); err != nil {
			return nil, fmt.Errorf("vmm pool: an earlier daemon's pool: %w", err)
		}
		named = true
		pressure = filepath.Join(j.CgroupParent, "memory.pressure")
	}
	os.RemoveAll(m.poolDir())
	if err := os.MkdirAll(m.poolDir(), 0o700); err != nil {
		return nil, fmt.Errorf("vmm pool: %w", err)
	}
	p := newVMMPool(m.opt.VMMPool, m.spawnPooled, func() (float64, error) { return memoryPressure(pressure) }, m.log)
	p.jailed = m.opt.Jail != nil // spawnPooled's namespaces
	p.named = named
	return p, nil
}

// sweepPool kills and removes, under the cgroups' parent, the cgroup of
// every pooled process whose log is in dir (a process is started for a
// sandbox id and logs to <id>.log until it is claimed) and which no VM of
// the state directory is named after (names, vmNames): those an earlier
// daemon left idle, or claimed for a start that made nothing yet. A
// claimed one's VM, whatever became of it, is recover's. It returns the
// paths it removed.
func sweepPool(dir, parent string, names map[string]bool) []string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	var swept []string
	for _, l := range logs {
		id := strings.TrimSuffix(filepath.Base(l), ".log")
		if !strings.HasPrefix(id, "sb-") || names[id] {
			continue
		}
		path := filepath.Join(parent, id)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		jail.CgroupAt(path).Close()
		swept = append(swept, path)
	}
	return swept
}

// poolIdleLimits are a pooled process's cgroup's limits until a start
// writes its VM's.
var poolIdleLimits = jail.CgroupLimits{CPUMilli: 1000, MemoryBytes: jailMemOverheadMiB << 20, Pids: jailPids}

// spawnPooled starts one pooled process: the VMM binary as `vmm --pooled`
// with its end of a claim socket in control.PoolFD, in the jail's
// namespaces, its stdout nowhere and its stderr in a log of its own until
// a claim gives it its VM's. With the jail's cgroups it is started for a
// fresh sandbox id, born in that id's cgroup, and logs to <id>.log.
func (m *VMManager) spawnPooled() (_ *pooledVMM, err error) {
	name := "vmm-" + strconv.FormatUint(poolSeq.Add(1), 10)
	var cg *jail.Cgroup
	var id string
	if j := m.opt.Jail; j != nil && j.CgroupParent != "" { // newPool's named
		id = newID(m.opt.Node)
		if cg, err = jail.NewCgroup(m.opt.Jail.CgroupParent, id, poolIdleLimits); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				cg.Close()
			}
		}()
		name = id
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("claim socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "vmm pool"), os.NewFile(uintptr(fds[1]), "vmm pool (child)")
	defer theirs.Close()
	logPath := filepath.Join(m.poolDir(), name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer logf.Close()
	cmd := vmmProcess(m.opt.Exe, control.PooledArgs(), m.opt.ExeEnv, m.opt.Jail != nil, cg)
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{theirs} // control.PoolFD
	if err := cmd.Start(); err != nil {
		ours.Close()
		os.Remove(logPath)
		return nil, fmt.Errorf("start a pooled vmm process: %w", err)
	}
	c := &poolProc{cmd: cmd, sock: ours, log: logPath}
	v := &pooledVMM{pid: cmd.Process.Pid, done: make(chan struct{}), claimer: c, rss: func() int64 { return procRSS(cmd.Process.Pid) },
		id: id, cgroup: cg}
	if cg != nil {
		v.cgroupPath = cg.Path
	}
	v.end = func() {
		cmd.Process.Kill()
		<-v.done
		ours.Close()
		os.Remove(logPath)
		v.cgroup.Close() // nil once a start took it
	}
	go func() {
		v.err = cmd.Wait()
		close(v.done)
	}()
	return v, nil
}

// claimPooled makes the pooled process v the VMM of the sandbox in dir:
// moves it into st's cgroup unless it was born there (then removes the
// cgroup it leaves), records it as the sandbox's process, and
// hands it its spec (open at spec), console, log and extra, the slots'
// files in Pass's order. On error the process is ended and nothing of it
// is recorded: the caller starts a process of its own.
func claimPooled(v *pooledVMM, dir string, st vmStart, spec, console, logf *os.File, extra []*os.File) (_ *vmProc, err error) {
	t0 := time.Now()
	defer func() {
		if err != nil {
			v.end()
			os.Remove(filepath.Join(dir, procFile))
		}
	}()
	if st.cgroup != nil && st.cgroup.Path != v.cgroupPath {
		if err := st.cgroup.Move(v.pid); err != nil {
			return nil, err
		}
		if old := v.takeCgroup(); old != nil {
			go old.Close() // empty now; its rmdir waits on the kernel
		}
	}
	p := &vmProc{pid: v.pid, dir: dir, cmd: v.claimer.cmd, done: make(chan struct{}), rec: procRecord{PID: v.pid}, pooled: true}
	if st.cgroup != nil {
		p.rec.Cgroup = st.cgroup.Path
	}
	// Recorded before the claim: a daemon that dies after it leaves a
	// process the next one finds by its record.
	start, err := procStartTime(p.pid)
	if err != nil {
		return nil, err
	}
	p.rec.StartTime = start
	if err := recordProc(dir, p.rec); err != nil {
		return nil, err
	}
	if err := control.SendClaim(v.claimer.sock, spec, console, logf, extra); err != nil {
		return nil, err
	}
	v.claimer.sock.Close()
	// Its log from before the claim goes with its sandbox.
	if err := os.Rename(v.claimer.log, filepath.Join(dir, poolLogFile)); err != nil {
		os.Remove(v.claimer.log)
	}
	p.spawnTook = time.Since(t0)
	go func() {
		<-v.done
		p.exit(v.err)
	}()
	return p, nil
}

// procRSS is process pid's resident memory in bytes (0: unknown).
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
