package interp

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"golang.org/x/sys/unix"
)

// killIfAlive kills a process the test knows may have escaped, and reaps it
// if it was re-parented to the test.
func killIfAlive(pid int) {
	if procAlive(pid) {
		_ = unix.Kill(pid, unix.SIGKILL)
		reapOrphans([]int{pid}, time.Second)
	}
}

func TestMemoryErrorUnderAddressSpaceLimit(t *testing.T) {
	in := newTestInterp(t, func(c *Config) { c.AddressSpaceLimit = 2 << 30 })
	expectOK(t, run(t, in, "import numpy as np, pandas as pd\nx = np.arange(10)"))
	res := run(t, in, "big = bytearray(4 * 1024**3)")
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "MemoryError" || !res.StateKept {
		t.Fatalf("huge allocation: %+v", res)
	}
	res = run(t, in, "int(x.sum())")
	expectOK(t, res)
	if got := mainText(t, res); got != "45" {
		t.Errorf("x.sum() = %s", got)
	}
}

// testCgroupParent makes a cgroup v2 directory with the memory controller
// for the test, or skips.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	root := ""
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skipf("skipping cgroup test: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mountpoint ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields := strings.Fields(pre)
		if ok && strings.HasPrefix(post, "cgroup2 ") && len(fields) >= 5 && fields[3] == "/" {
			root = fields[4]
			break
		}
	}
	if root == "" {
		t.Skip("skipping cgroup OOM test: no cgroup2 mount at a hierarchy root")
	}
	ctrls, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil || !hasWord(string(ctrls), "memory") {
		t.Skipf("skipping cgroup OOM test: the memory controller is not available in cgroup2 at %s (controllers %q; on a hybrid host it is bound to cgroup v1)", root, strings.TrimSpace(string(ctrls)))
	}
	sub, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control"))
	if !hasWord(string(sub), "memory") {
		if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+memory"), 0); err != nil {
			t.Skipf("skipping cgroup OOM test: cannot enable memory in %s: %v", root, err)
		}
	}
	parent, err := os.MkdirTemp(root, "cellvm-test-")
	if err != nil {
		t.Skipf("skipping cgroup OOM test: %s not writable: %v", root, err)
	}
	t.Cleanup(func() {
		for range 100 {
			if unix.Rmdir(parent) == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("cgroup %s left behind", parent)
	})
	return parent
}

func TestOOMKillInCgroup(t *testing.T) {
	parent := testCgroupParent(t)
	in := newTestInterp(t, func(c *Config) {
		c.CgroupParent = parent
		c.MemoryMax = 256 << 20
	})
	expectOK(t, run(t, in, "x = 1"))
	res := runT(t, in, "hog = []\nwhile True:\n    hog.append(b'\\x01' * (16 << 20))", time.Minute)
	if res.Status != cell.StatusError || res.KilledBy != cell.KilledByOOM || res.StateKept {
		t.Fatalf("OOM cell: %+v", res)
	}
	if res.Error == nil || res.Error.Name != "OutOfMemory" {
		t.Errorf("error %+v", res.Error)
	}
	res = run(t, in, "'x' in globals()")
	expectOK(t, res)
	if got := mainText(t, res); got != "False" {
		t.Errorf("state after OOM: %s", got)
	}
}
