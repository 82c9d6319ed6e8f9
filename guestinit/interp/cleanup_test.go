package interp

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// spawnCode starts three kinds of processes and prints their pids: a plain
// subprocess, one in a new session (outside the process group), and a
// fork of the interpreter itself. Then it blocks in tail.
const spawnCode = `import os, subprocess, sys, time
a = subprocess.Popen(['sleep', '1000'])
b = subprocess.Popen(['sleep', '1001'], start_new_session=True)
c = os.fork()
if c == 0:
    time.sleep(1000)
    os._exit(0)
print(a.pid, b.pid, c, flush=True)
`

func spawnedPids(t *testing.T, stdout string) []int {
	t.Helper()
	var pids []int
	for _, f := range strings.Fields(stdout) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("stdout %q: %v", stdout, err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 3 {
		t.Fatalf("stdout %q: want 3 pids", stdout)
	}
	return pids
}

func TestChildrenDieWithInterruptedCell(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	res := runT(t, in, spawnCode+"time.sleep(100)", 1500*time.Millisecond)
	if res.Status != cell.StatusTimeout || !res.StateKept {
		t.Fatalf("status %q state_kept %v: %+v", res.Status, res.StateKept, res)
	}
	for _, pid := range spawnedPids(t, res.Stdout) {
		waitGone(t, pid, 3*time.Second)
	}
	// The interpreter lives on, and a process started by a later cell that
	// finishes normally is left alone (a cell may start a server).
	res = run(t, in, "import subprocess\nsrv = subprocess.Popen(['sleep', '1002'])\nsrv.pid")
	expectOK(t, res)
	pid, _ := strconv.Atoi(mainText(t, res))
	time.Sleep(100 * time.Millisecond)
	if !procAlive(pid) {
		t.Errorf("process of a normal cell was killed")
	}
	run(t, in, "srv.kill(); srv.wait()")
}

func TestChildrenDieWithKilledInterpreter(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	code := spawnCode + "while True:\n    try:\n        time.sleep(10)\n    except KeyboardInterrupt:\n        pass"
	res := runT(t, in, code, time.Second)
	if res.Status != cell.StatusTimeout || res.StateKept {
		t.Fatalf("status %q state_kept %v", res.Status, res.StateKept)
	}
	for _, pid := range spawnedPids(t, res.Stdout) {
		waitGone(t, pid, 3*time.Second)
	}
	expectOK(t, run(t, in, "1"))
}

func TestChildrenDieWithCrashedInterpreter(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	res := run(t, in, spawnCode+"os._exit(1)")
	if res.Status != cell.StatusLost {
		t.Fatalf("status %q", res.Status)
	}
	// The session leader b left the group and its parent died before the
	// supervisor looked: only a cgroup could find it. The other two must
	// be gone.
	pids := spawnedPids(t, res.Stdout)
	waitGone(t, pids[0], 3*time.Second)
	waitGone(t, pids[2], 3*time.Second)
	killIfAlive(pids[1])
}

func TestCloseKillsEverything(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	res := run(t, in, spawnCode)
	expectOK(t, res)
	pids := spawnedPids(t, res.Stdout)
	py := in.cur.Load().pid
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range append(pids, py) {
		waitGone(t, pid, 3*time.Second)
	}
}

func countFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestNoFDLeakAcrossRestarts(t *testing.T) {
	before := countFDs(t)
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "1"))
	run(t, in, "import os\nos._exit(1)")
	runT(t, in, "while True:\n    try:\n        import time; time.sleep(5)\n    except KeyboardInterrupt:\n        pass", 300*time.Millisecond)
	if err := in.Restart(); err != nil {
		t.Fatal(err)
	}
	expectOK(t, run(t, in, "1"))
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if after := countFDs(t); after != before {
		t.Errorf("open fds: %d before, %d after", before, after)
	}
	if _, err := os.Stat(in.runDir); !os.IsNotExist(err) {
		t.Errorf("run dir %s left behind: %v", in.runDir, err)
	}
}
