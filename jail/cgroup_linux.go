package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupLimits are what one VMM's cgroup allows.
type CgroupLimits struct {
	CPUMilli    int   // cpu.max: this many thousandths of a CPU's time (1000: one CPU)
	MemoryBytes int64 // memory.max (and no swap)
	Pids        int   // pids.max: threads and processes
}

// Cgroup is one VMM's cgroup v2 directory, open for CLONE_INTO_CGROUP.
// Close removes it once its process is gone.
type Cgroup struct {
	Path string
	dir  *os.File
}

// controllers are what a VMM's cgroup limits.
var controllers = []string{"cpu", "memory", "pids"}

// CgroupV2 reports whether dir is on a cgroup v2 file system.
func CgroupV2(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// PrepareCgroupParent makes parent (e.g. /sys/fs/cgroup/cellvm) if it
// is missing and enables the cpu, memory and pids controllers for its
// children; it must be on cgroup v2. NewCgroup calls it; a daemon calls it
// alone to learn early that it cannot make its VMs' cgroups.
func PrepareCgroupParent(parent string) error {
	top := filepath.Dir(parent)
	if !CgroupV2(top) {
		return fmt.Errorf("%s is not a cgroup v2 file system (mount cgroup2 there, or run the daemon without a per-VM cgroup)", top)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("cgroup %s: %w", parent, err)
	}
	for _, d := range []string{top, parent} {
		if err := enableControllers(d); err != nil {
			return err
		}
	}
	return nil
}

// NewCgroup makes parent/name with the limits (PrepareCgroupParent first).
// A cgroup already there is taken as it is and given the limits.
func NewCgroup(parent, name string, l CgroupLimits) (*Cgroup, error) {
	if name == "" || strings.ContainsAny(name, "/.") {
		return nil, fmt.Errorf("cgroup name %q", name)
	}
	if err := PrepareCgroupParent(parent); err != nil {
		return nil, err
	}
	path := filepath.Join(parent, name)
	if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	c := &Cgroup{Path: path}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	if err := c.SetLimits(l); err != nil {
		return nil, err
	}
	dir, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	c.dir = dir
	ok = true
	return c, nil
}

// SetLimits writes the limits into the cgroup: a VMM started ahead in a
// cgroup of its own (a daemon's pool) gets its VM's limits there before
// it is given the VM, instead of moving into another cgroup.
func (c *Cgroup) SetLimits(l CgroupLimits) error {
	writes := []struct{ file, value string }{
		{"cpu.max", fmt.Sprintf("%d 100000", max(l.CPUMilli, 1)*100)},
		{"memory.max", strconv.FormatInt(l.MemoryBytes, 10)},
		{"pids.max", strconv.Itoa(l.Pids)},
	}
	for _, w := range writes {
		if err := os.WriteFile(filepath.Join(c.Path, w.file), []byte(w.value), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: set %s: %w", c.Path, w.file, err)
		}
	}
	// No swap: a VMM's memory is its guest's, and swapping it is a host
	// decision this file would otherwise leave to chance. Absent without
	// swap accounting; that is fine.
	os.WriteFile(filepath.Join(c.Path, "memory.swap.max"), []byte("0"), 0o644)
	return nil
}

// enableControllers turns on, for dir's children, those of controllers dir
// has and has not enabled yet.
func enableControllers(dir string) error {
	have, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	on, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	for _, c := range controllers {
		if !slices.Contains(strings.Fields(string(have)), c) {
			return fmt.Errorf("cgroup %s lacks the %s controller", dir, c)
		}
		if slices.Contains(strings.Fields(string(on)), c) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0o644); err != nil {
			return fmt.Errorf("cgroup %s: enable %s for its children: %w", dir, c, err)
		}
	}
	return nil
}

// CgroupAt is the cgroup an earlier daemon made at path, for a daemon that
// takes its VMM back: it can only be closed (removed).
func CgroupAt(path string) *Cgroup { return &Cgroup{Path: path} }

// Kill kills every process in the cgroup at once (cgroup.kill, Linux
// 5.14), whatever they call themselves: the one kill a VMM that rewrote
// its argv, forked or raced its pid file cannot slip. On a kernel without
// cgroup.kill it sends SIGKILL to each process cgroup.procs lists, a few
// rounds, since one may fork meanwhile. A cgroup that is gone is no error.
func (c *Cgroup) Kill() error {
	if c == nil || c.Path == "" {
		return nil
	}
	return killCgroup(c.Path)
}

func killCgroup(path string) error {
	err := writeExisting(filepath.Join(path, "cgroup.kill"), "1")
	if err == nil || errors.Is(err, os.ErrNotExist) && !exists(path) {
		return nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("kill cgroup %s: %w", path, err)
	}
	for range 10 {
		pids, err := CgroupPids(path)
		if err != nil || len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("kill cgroup %s: its processes outlived ten rounds of SIGKILL", path)
}

// writeExisting writes value to a cgroup file that must exist (no
// O_CREATE: a missing one is ErrNotExist, not a permission error).
func writeExisting(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// CgroupPids lists the processes in the cgroup at path (cgroup.procs: pids
// in the reader's pid namespace), the way to tell that a pid is the
// process a daemon put there, whatever its argv says.
func CgroupPids(path string) ([]int, error) {
	b, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// Move moves process pid, all its threads, into the cgroup (cgroup.procs):
// a VMM started ahead for another VM joins this one's before it is given
// the VM. What it was charged before stays with the cgroup it left. The
// kernel's migration waits for an RCU grace period (tens of ms, unless
// cgroup2 is mounted with favordynmods): a process born in its cgroup
// (CLONE_INTO_CGROUP, FD) does not.
func (c *Cgroup) Move(pid int) error {
	if err := writeExisting(filepath.Join(c.Path, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
		return fmt.Errorf("move process %d into cgroup %s: %w", pid, c.Path, err)
	}
	return nil
}

// FD is the directory descriptor for syscall.SysProcAttr.CgroupFD.
func (c *Cgroup) FD() int { return int(c.dir.Fd()) }

// Close closes the descriptor, kills whatever still runs in the cgroup
// (Kill: a cgroup is removed only once its VMM is gone, and a process
// left in it would keep it, and itself, alive unseen) and removes it,
// waiting briefly for its last process to be reaped; it is idempotent.
func (c *Cgroup) Close() error {
	if c == nil {
		return nil
	}
	if c.dir != nil {
		c.dir.Close()
		c.dir = nil
	}
	if c.Path == "" {
		return nil
	}
	if pids, _ := CgroupPids(c.Path); len(pids) > 0 {
		if err := c.Kill(); err != nil {
			return err
		}
	}
	var err error
	for range 50 {
		if err = unix.Rmdir(c.Path); err == nil || errors.Is(err, unix.ENOENT) {
			c.Path = ""
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", c.Path, err)
}
