package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// poolInfo is m's pool's state from its capacity, as a caller sees it.
func poolInfo(t *testing.T, m *VMManager) sandbox.VMMPoolInfo {
	t.Helper()
	c, err := m.Capacity(context.Background())
	if err != nil || c.VMMPool == nil {
		t.Fatalf("capacity: %+v, %v; want a vmm_pool", c, err)
	}
	return *c.VMMPool
}

// waitPoolReady waits until m's pool holds n ready processes.
func waitPoolReady(t *testing.T, m *VMManager, n int) sandbox.VMMPoolInfo {
	t.Helper()
	return waitPool(t, m.pool, "ready", func(i sandbox.VMMPoolInfo) bool { return i.Ready == n })
}

// readyPIDs are the pids of m's pool's idle processes.
func readyPIDs(m *VMManager) []int {
	m.pool.mu.Lock()
	defer m.pool.mu.Unlock()
	var pids []int
	for _, v := range m.pool.ready {
		pids = append(pids, v.pid)
	}
	return pids
}

// pidAlive reports whether process pid exists (and is not a zombie).
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || len(b) < i+3 || b[i+2] != 'Z'
}

// TestCreateClaimsAPooledVMM: with a pool, a create's VMM is a process the
// pool started ahead: the sandbox's process is that pid, its console and
// log are the sandbox's own (the fake guest's line reaches console.log),
// its log from before the claim is kept beside them, and a cell runs.
// The pool refills, and the manager's Close leaves no pooled process.
func TestCreateClaimsAPooledVMM(t *testing.T) {
	m, state, _ := newRoleManager(t, "agent", func(o *Options) { o.VMMPool = 1 })
	waitPoolReady(t, m, 1)
	pooled := readyPIDs(m)[0]
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := sandboxOf(t, m, info.ID)
	if s.proc.pid != pooled || !s.proc.pooled || !s.startSteps.Pooled {
		t.Errorf("the sandbox's VMM is pid %d (pooled %v), the pool's ready one was %d", s.proc.pid, s.proc.pooled, pooled)
	}
	if i := poolInfo(t, m); i.Claimed != 1 || i.Missed != 0 {
		t.Errorf("after a create: %+v; want one claimed", i)
	}
	res, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil)
	if err != nil || res.Status != "ok" {
		t.Fatalf("cell on a pooled VMM's sandbox: %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.dir, consoleFile)); !strings.Contains(string(b), "fake guest: booted") {
		t.Errorf("the sandbox's console does not hold its guest's output: %q", b)
	}
	if _, err := os.Stat(filepath.Join(s.dir, poolLogFile)); err != nil {
		t.Errorf("the pooled process's own log did not move into its sandbox: %v", err)
	}
	rec, err := readProcRecord(s.dir)
	if err != nil || rec.PID != pooled || rec.StartTime == 0 {
		t.Errorf("the process record: %+v, %v; want the pooled pid %d", rec, err, pooled)
	}
	spec, err := control.ReadSpec(filepath.Join(s.dir, specFile))
	if err != nil || spec.Vsock == nil {
		t.Errorf("the sandbox's vmm.json: %+v, %v", spec, err)
	}
	waitPoolReady(t, m, 1)
	next := readyPIDs(m)[0]
	if next == pooled {
		t.Fatal("the pool's ready process is the one claimed")
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if pidAlive(pooled) {
		t.Error("the claimed VMM outlived its sandbox")
	}
	assertNothingLeft(t, m, state)
	m.Close()
	if pidAlive(next) {
		t.Error("an idle pooled process outlived the manager's Close")
	}
	if ents, _ := os.ReadDir(m.poolDir()); len(ents) != 0 {
		t.Errorf("the pool's directory holds %d files after Close", len(ents))
	}
}

// TestPooledVMMDeadBeforeItsClaim: a start whose pooled process died just
// before its claim (killed, not yet seen by the pool) starts a process of
// its own and succeeds; the pool replaces the dead one.
func TestPooledVMMDeadBeforeItsClaim(t *testing.T) {
	m, state, _ := newRoleManager(t, "agent", func(o *Options) { o.VMMPool = 1 })
	waitPoolReady(t, m, 1)
	dead := readyPIDs(m)[0]
	syscall.Kill(dead, syscall.SIGKILL)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatalf("create after the pooled process died: %v", err)
	}
	s := sandboxOf(t, m, info.ID)
	if s.proc.pid == dead {
		t.Fatal("the sandbox's VMM is the dead pooled process")
	}
	if res, err := m.RunCell(ctx, info.ID, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil); err != nil || res.Status != "ok" {
		t.Fatalf("cell: %+v, %v", res, err)
	}
	waitPool(t, m.pool, "replaced", func(i sandbox.VMMPoolInfo) bool { return i.Ready == 1 && i.Spawned >= 2 })
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, m, state)
}

// TestPooledVMMEndsWithItsDaemon: a pooled process whose daemon goes away
// without claiming it (its end of the claim socket closed) exits by
// itself.
func TestPooledVMMEndsWithItsDaemon(t *testing.T) {
	m, _, _ := newRoleManager(t, "agent", func(o *Options) { o.VMMPool = 1 })
	waitPoolReady(t, m, 1)
	m.pool.mu.Lock()
	v := m.pool.ready[0]
	m.pool.mu.Unlock()
	v.claimer.sock.Close() // what a daemon's exit does to it
	select {
	case <-v.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a pooled process whose daemon closed its socket still runs")
	}
	if v.err != nil {
		t.Errorf("an unclaimed pooled process exited with %v, want 0", v.err)
	}
}

// TestPoolThatCannotBeMadeIsOff: a daemon whose pool cannot be made (here
// its cgroup, under a parent that is a file) serves without one, says so
// in its log, and leaves no pool directory behind.
func TestPoolThatCannotBeMadeIsOff(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "not-a-cgroup")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m, state, logs := newRoleManager(t, "agent", func(o *Options) {
		o.VMMPool = 2
		o.Jail = &JailOptions{UIDBase: 300_000_000, CgroupParent: parent}
	})
	if m.pool != nil {
		t.Fatal("the manager has a pool though its cgroup could not be made")
	}
	c, err := m.Capacity(context.Background())
	if err != nil || c.VMMPool != nil {
		t.Errorf("capacity: vmm_pool %+v, %v; want none", c.VMMPool, err)
	}
	if !strings.Contains(logs.String(), "vmm pool: off") {
		t.Errorf("the log does not say the pool is off:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(state, "vmm-pool")); !os.IsNotExist(err) {
		t.Errorf("the pool's directory is left behind: %v", err)
	}
}

// TestSweepPool: a daemon's pool sweep removes the cgroups of the pooled
// processes an earlier daemon's pool directory names (<id>.log) unless a
// VM of the state directory is named after the id (a claimed one's,
// recover's), and touches no cgroup the directory does not name. Plain
// directories stand in for cgroups: removing an empty one is the same
// rmdir.
func TestSweepPool(t *testing.T) {
	dir, parent := t.TempDir(), t.TempDir()
	for _, name := range []string{"sb-idle.log", "sb-claimed.log", "sb-nocgroup.log", "vmm-3.log"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"sb-idle", "sb-claimed", "sb-other", "vmm-3"} {
		if err := os.Mkdir(filepath.Join(parent, id), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	swept := sweepPool(dir, parent, map[string]bool{"sb-claimed": true})
	if want := []string{filepath.Join(parent, "sb-idle")}; !slices.Equal(swept, want) {
		t.Errorf("swept %q, want %q", swept, want)
	}
	for id, want := range map[string]bool{"sb-idle": false, "sb-claimed": true, "sb-other": true, "vmm-3": true} {
		if _, err := os.Stat(filepath.Join(parent, id)); (err == nil) != want {
			t.Errorf("%s there after the sweep: %v, want %v", id, err == nil, want)
		}
	}
}

// TestClaimOfAProcessBornInItsCgroup: a claim does not move a pooled
// process born in its VM's cgroup (the moves cost a grace period each),
// and does move one born elsewhere. Plain directories stand in for the
// cgroups: a move into one fails (no cgroup.procs), so only a claim that
// moves nothing succeeds.
func TestClaimOfAProcessBornInItsCgroup(t *testing.T) {
	m, _, _ := newRoleManager(t, "agent", func(o *Options) { o.VMMPool = 1 })
	claim := func(born, vm string) error {
		t.Helper()
		waitPoolReady(t, m, 1)
		v := m.pool.claim()
		v.cgroupPath = born
		dir := t.TempDir()
		var files []*os.File
		for _, name := range []string{specFile, consoleFile, vmmLogFile} {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			files = append(files, f)
		}
		p, err := claimPooled(v, dir, vmStart{cgroup: jail.CgroupAt(vm)}, files[0], files[1], files[2], nil)
		if err == nil {
			p.kill()
			<-p.done
		}
		return err
	}
	cg := filepath.Join(t.TempDir(), "sb-born")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := claim(cg, cg); err != nil {
		t.Errorf("claim of a process born in its VM's cgroup: %v; want no move", err)
	}
	if err := claim(filepath.Join(t.TempDir(), "sb-elsewhere"), cg); err == nil || !strings.Contains(err.Error(), "move process") {
		t.Errorf("claim of a process born elsewhere: %v; want its move tried", err)
	}
}

// TestOnlyAnAdmittedCreateTakesAPooledVMM: a create that must wait for its
// slot takes no process from the pool while it waits, and one refused (the
// line full) or given up in the line leaves the pool's ready process
// alive in the pool; a create that finds its slot free takes it, by its
// id. The pool here stands in for one whose processes are born in cgroups
// named after sandbox ids (the jail's; claimNamed): its ready process is
// given an id.
func TestOnlyAnAdmittedCreateTakesAPooledVMM(t *testing.T) {
	m, _, _ := newRoleManager(t, "agent", func(o *Options) { o.VMMPool, o.BootConcurrency, o.BootQueue = 1, 1, 1 })
	waitPoolReady(t, m, 1)
	pooledID := newID("")
	m.pool.mu.Lock()
	m.pool.named = true
	m.pool.ready[0].id = pooledID
	m.pool.mu.Unlock()
	ready := readyPIDs(m)

	release := holdSlots(t, m)
	cancel, errc := createInLine(t, m)
	if got := readyPIDs(m); !slices.Equal(got, ready) {
		t.Errorf("pool while a create waits for its slot: ready %v, want %v untouched", got, ready)
	}
	if _, err := m.Create(context.Background(), sandbox.Config{}); !errors.Is(err, sandbox.ErrQueueFull) {
		t.Fatalf("create past the full line: %v, want ErrQueueFull", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("create given up in the line: %v, want context.Canceled", err)
	}
	if got := readyPIDs(m); !slices.Equal(got, ready) || !pidAlive(ready[0]) {
		t.Errorf("pool after a refused and a given-up create: ready %v (pid %d alive %v), want %v", got, ready[0], pidAlive(ready[0]), ready)
	}
	if i := poolInfo(t, m); i.Claimed != 0 {
		t.Errorf("pool counts %d claims with no create admitted", i.Claimed)
	}

	release()
	info, err := m.Create(context.Background(), sandbox.Config{})
	if err != nil {
		t.Fatalf("create with its slot free: %v", err)
	}
	defer m.Delete(context.Background(), info.ID)
	if info.ID != pooledID {
		t.Errorf("create with its slot free is %s, want the pooled process's id %s", info.ID, pooledID)
	}
	if i := poolInfo(t, m); i.Claimed != 1 {
		t.Errorf("pool counts %d claims after one admitted create, want 1", i.Claimed)
	}
}
