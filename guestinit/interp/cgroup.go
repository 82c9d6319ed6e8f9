package interp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroup is a cgroup v2 directory of the supervisor's. The supervisor
// makes one for all user code (its memory.max and pids.max are the cells'
// budget), and inside it one for the interpreter and one for each command:
// memory.events then tells an OOM kill of each apart from any other death.
// The directories and their files belong to root, so code running as the
// cells' user can neither change the limits nor move itself out.
type cgroup struct {
	dir string
}

// newCgroup creates a child of parent named prefix plus a random suffix,
// with the given memory.max and pids.max (0: no limit of its own). parent
// must be a cgroup v2 directory with the memory controller available; the
// pids controller is used where it is available.
func newCgroup(parent, prefix string, memoryMax, pidsMax int64) (*cgroup, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return nil, fmt.Errorf("cgroup parent %s: %w", parent, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("cgroup parent %s is not on a cgroup v2 file system", parent)
	}
	ctrls, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("cgroup parent %s: %w", parent, err)
	}
	if !hasWord(string(ctrls), "memory") {
		return nil, fmt.Errorf("cgroup parent %s: memory controller not available (controllers: %q)", parent, strings.TrimSpace(string(ctrls)))
	}
	sub, err := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control"))
	if err != nil {
		return nil, fmt.Errorf("cgroup parent %s: %w", parent, err)
	}
	if !hasWord(string(sub), "memory") {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			return nil, fmt.Errorf("cgroup parent %s: enable memory controller: %w", parent, err)
		}
	}
	pids := hasWord(string(ctrls), "pids")
	if pids && !hasWord(string(sub), "pids") {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
			return nil, fmt.Errorf("cgroup parent %s: enable pids controller: %w", parent, err)
		}
	}
	// The cpu controller, with no limit: user code then shares the CPU as
	// one group with the processes outside it (the agent), however many
	// processes it forks.
	if hasWord(string(ctrls), "cpu") && !hasWord(string(sub), "cpu") {
		_ = os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0)
	}
	if pidsMax > 0 && !pids {
		return nil, fmt.Errorf("cgroup parent %s: pids controller not available (controllers: %q)", parent, strings.TrimSpace(string(ctrls)))
	}
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	// MkdirTemp's 0700 would hide the limits from the cells' user; they
	// may read them, not write them (the files are root's, 0644).
	if err := os.Chmod(dir, 0o755); err != nil {
		unix.Rmdir(dir)
		return nil, fmt.Errorf("create cgroup: %w", err)
	}
	cg := &cgroup{dir: dir}
	if pidsMax > 0 {
		if err := cg.write("pids.max", strconv.FormatInt(pidsMax, 10)); err != nil {
			cg.remove()
			return nil, err
		}
	}
	if memoryMax > 0 {
		if err := cg.write("memory.max", strconv.FormatInt(memoryMax, 10)); err != nil {
			cg.remove()
			return nil, err
		}
		// Without swap limits the cgroup would swap instead of hitting
		// its limit; not every kernel has the file.
		_ = cg.write("memory.swap.max", "0")
	}
	return cg, nil
}

func hasWord(s, w string) bool {
	for _, f := range strings.Fields(s) {
		if f == w {
			return true
		}
	}
	return false
}

func (c *cgroup) write(file, value string) error {
	if err := os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup %s: write %s: %w", c.dir, file, err)
	}
	return nil
}

// openFD opens the directory for clone3's CLONE_INTO_CGROUP, so the
// interpreter starts inside the cgroup with no window outside it.
func (c *cgroup) openFD() (int, error) {
	fd, err := unix.Open(c.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open cgroup %s: %w", c.dir, err)
	}
	return fd, nil
}

// oomKills returns the oom_kill counter of memory.events.
func (c *cgroup) oomKills() int64 {
	b, err := os.ReadFile(filepath.Join(c.dir, "memory.events"))
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == "oom_kill" {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// procs lists the pids in the cgroup.
func (c *cgroup) procs() []int {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out
}

// killAllBut kills every process in the cgroup except keep, with the
// cgroup frozen meanwhile, so that a process forking without end (a fork
// bomb) cannot replace those it loses; it returns the pids it killed.
// Where the kernel has no cgroup freezer it kills without freezing.
func (c *cgroup) killAllBut(keep int) []int {
	if c.write("cgroup.freeze", "1") == nil {
		// However the freeze went, the cgroup is thawed again: a cgroup
		// left frozen would hold every interpreter started into it.
		defer c.write("cgroup.freeze", "0") // the killed die as they thaw
		c.waitFrozen(5 * time.Second)
	}
	var killed []int
	for _, pid := range c.procs() {
		if pid != keep {
			_ = unix.Kill(pid, unix.SIGKILL)
			killed = append(killed, pid)
		}
	}
	return killed
}

// waitFrozen waits up to d for cgroup.events to say the cgroup is frozen.
func (c *cgroup) waitFrozen(d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(c.dir, "cgroup.events"))
		if strings.Contains(string(b), "frozen 1") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// killAll kills every process in the cgroup.
func (c *cgroup) killAll() {
	if c.write("cgroup.kill", "1") == nil {
		return
	}
	for _, pid := range c.procs() { // kernels before 5.14
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// remove kills what is left and removes the directory, waiting briefly for
// the kernel to let go of exiting processes.
func (c *cgroup) remove() error {
	c.killAll()
	var err error
	for range 100 {
		err = unix.Rmdir(c.dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
}
