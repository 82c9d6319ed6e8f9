package jail

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// testCgroupDir makes a cgroup v2 directory for a test, removed after it;
// the test is skipped where there is none to write.
func testCgroupDir(t *testing.T, name string) string {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if !CgroupV2(root) {
			continue
		}
		d := filepath.Join(root, fmt.Sprintf("cellvm-jail-%s-%d", name, os.Getpid()))
		if err := os.Mkdir(d, 0o755); err == nil {
			t.Cleanup(func() { os.Remove(d) })
			return d
		}
	}
	t.Skip("no writable cgroup v2 hierarchy here")
	return ""
}

// sleepIn starts a sleep cloned into the cgroup at dir (skipping the test
// where a clone into a cgroup is refused).
func sleepIn(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if err := cmd.Start(); err != nil {
		t.Skipf("clone into a cgroup: %v", err)
	}
	return cmd
}

// TestCgroupCloseKillsWhatRuns: Close of a cgroup a process still runs in
// kills it (cgroup.kill) and removes the cgroup; a second Close, and a
// Kill of a cgroup that is gone, are no errors.
func TestCgroupCloseKillsWhatRuns(t *testing.T) {
	dir := testCgroupDir(t, "close")
	cmd := sleepIn(t, dir)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	if pids, err := CgroupPids(dir); err != nil || !slices.Contains(pids, cmd.Process.Pid) {
		t.Fatalf("the cgroup's processes: %v, %v; want %d among them", pids, err, cmd.Process.Pid)
	}
	c := CgroupAt(dir)
	if err := c.Close(); err != nil {
		t.Fatalf("close a cgroup a process runs in: %v", err)
	}
	select {
	case err := <-waited:
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Errorf("the process ended %v, want killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the process outlived its cgroup's Close")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the cgroup is left after Close")
	}
	if err := c.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if err := CgroupAt(dir).Kill(); err != nil {
		t.Errorf("kill a cgroup that is gone: %v", err)
	}
}

// TestCgroupMove: Move takes a running process out of the cgroup it was
// cloned into and puts it, whole, in another.
func TestCgroupMove(t *testing.T) {
	dir := testCgroupDir(t, "move")
	pool, vm := CgroupAt(filepath.Join(dir, "pool")), CgroupAt(filepath.Join(dir, "vm"))
	for _, c := range []*Cgroup{pool, vm} {
		if err := os.Mkdir(c.Path, 0o755); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	cmd := sleepIn(t, pool.Path)
	defer cmd.Wait()
	defer cmd.Process.Kill()
	if err := vm.Move(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in, _ := CgroupPids(vm.Path)
	left, _ := CgroupPids(pool.Path)
	if !slices.Contains(in, cmd.Process.Pid) || len(left) != 0 {
		t.Errorf("after Move: the VM's cgroup holds %v, the pool's %v; want %d moved", in, left, cmd.Process.Pid)
	}
	if err := vm.Move(1 << 30); err == nil {
		t.Error("Move of a pid that does not exist succeeded")
	}
}
