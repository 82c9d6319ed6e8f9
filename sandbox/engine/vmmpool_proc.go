package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
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

// poolSeq numbers the pooled processes' logs.
var poolSeq atomic.Uint64

// newPool makes m's VMM pool (nil when Options.VMMPool is 0): its
// directory, and with the jail's cgroups a cgroup of its own under the
// parent, named after the state directory (the parent may be shared by
// daemons of other state directories). What an earlier daemon of this
// state directory left in either is ended first.
func (m *VMManager) newPool() (*vmmPool, error) {
	if m.opt.VMMPool <= 0 {
		return nil, nil
	}
	os.RemoveAll(m.poolDir())
	if err := os.MkdirAll(m.poolDir(), 0o700); err != nil {
		return nil, fmt.Errorf("vmm pool: %w", err)
	}
	pressure := "/proc/pressure/memory"
	if j := m.opt.Jail; j != nil && j.CgroupParent != "" {
		sum := sha256.Sum256([]byte(m.opt.StateDir))
		name := "pool-" + hex.EncodeToString(sum[:6])
		if err := jail.CgroupAt(filepath.Join(j.CgroupParent, name)).Close(); err != nil {
			return nil, fmt.Errorf("vmm pool: an earlier daemon's pool: %w", err)
		}
		// No memory.max: what a process is charged before its claim
		// stays charged here after it moves into its VM's cgroup, so a
		// limit here would one day reclaim a running VM's pages. The
		// pids bound holds the idle ones; a claimed one is its VM's.
		cg, err := jail.NewCgroup(j.CgroupParent, name, jail.CgroupLimits{CPUMilli: 1000, MemoryBytes: math.MaxInt64, Pids: m.opt.VMMPool * jailPids})
		if err != nil {
			return nil, fmt.Errorf("vmm pool: %w", err)
		}
		m.poolCgroup = cg
		pressure = filepath.Join(filepath.Dir(cg.Path), "memory.pressure")
	}
	p := newVMMPool(m.opt.VMMPool, m.spawnPooled, func() (float64, error) { return memoryPressure(pressure) }, m.log)
	p.jailed = m.opt.Jail != nil // spawnPooled's namespaces
	return p, nil
}

// spawnPooled starts one pooled process: the VMM binary as `vmm --pooled`
// with its end of a claim socket in control.PoolFD, in the jail's
// namespaces and the pool's cgroup, its stdout nowhere and its stderr in
// a log of its own until a claim gives it its VM's.
func (m *VMManager) spawnPooled() (*pooledVMM, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("claim socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "vmm pool"), os.NewFile(uintptr(fds[1]), "vmm pool (child)")
	defer theirs.Close()
	logPath := filepath.Join(m.poolDir(), "vmm-"+strconv.FormatUint(poolSeq.Add(1), 10)+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		ours.Close()
		return nil, err
	}
	defer logf.Close()
	cmd := vmmProcess(m.opt.Exe, control.PooledArgs(), m.opt.ExeEnv, m.opt.Jail != nil, m.poolCgroup)
	cmd.Stderr = logf
	cmd.ExtraFiles = []*os.File{theirs} // control.PoolFD
	if err := cmd.Start(); err != nil {
		ours.Close()
		os.Remove(logPath)
		return nil, fmt.Errorf("start a pooled vmm process: %w", err)
	}
	c := &poolProc{cmd: cmd, sock: ours, log: logPath}
	v := &pooledVMM{pid: cmd.Process.Pid, done: make(chan struct{}), claimer: c, rss: func() int64 { return procRSS(cmd.Process.Pid) }}
	v.end = func() {
		cmd.Process.Kill()
		<-v.done
		ours.Close()
		os.Remove(logPath)
	}
	go func() {
		v.err = cmd.Wait()
		close(v.done)
	}()
	return v, nil
}

// claimPooled makes the pooled process v the VMM of the sandbox in dir:
// moves it into st's cgroup, records it as the sandbox's process, and
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
	if st.cgroup != nil {
		if err := st.cgroup.Move(v.pid); err != nil {
			return nil, err
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
