package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// procStatus reads the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// vmmOf is the pid of sandbox id's VMM process under state.
func vmmOf(t *testing.T, state, id string) int {
	t.Helper()
	for _, pid := range vmmProcesses(state) {
		if isVMMOf(pid, id) {
			return pid
		}
	}
	t.Fatalf("no vmm process for %s", id)
	return 0
}

// TestDaemonJailsVMM checks, through the real API and /proc, that the
// daemon's VMM runs in its jail: not root, no capabilities, no_new_privs,
// seccomp in filter mode, its own mount, pid and net namespaces, a root
// that holds only its VM's files, a cgroup with its limits, and that its
// sandbox works.
func TestDaemonJailsVMM(t *testing.T) {
	kvmtest.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("the jail needs a root daemon")
	}
	d := startDaemon(t, t.TempDir())
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	// The pool (on by default) starts its process for a sandbox id and in
	// that id's cgroup: the create takes both, and its VMM never moves.
	idle, idleCgroup := idlePooled(t, d.state)
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 384, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := vmmOf(t, d.state, info.ID); got != idle || idleCgroup != "/cellvm/"+info.ID {
		t.Errorf("the sandbox %s's VMM is pid %d; the pool's idle one was %d, in cgroup %s: want that process, born in its VM's cgroup", info.ID, got, idle, idleCgroup)
	}
	if r := mustCell(t, c, info.ID, "import os\n(os.getpid() > 1, 6 * 7)", 3*time.Minute); text(r) != "(True, 42)" {
		t.Errorf("cell in a jailed VMM: %+v", r)
	}
	pid := vmmOf(t, d.state, info.ID)
	st := procStatus(t, pid)
	if f := strings.Fields(st["Uid"]); len(f) != 4 || f[0] == "0" || f[1] == "0" || f[2] == "0" {
		t.Errorf("VMM Uid %q: it must not be root", st["Uid"])
	}
	for key, want := range map[string]string{"CapEff": "0000000000000000", "CapPrm": "0000000000000000",
		"CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if st[key] != want {
			t.Errorf("VMM %s = %q, want %q", key, st[key], want)
		}
	}
	daemonPid := d.cmd.Process.Pid
	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts"} {
		its, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		daemon, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", daemonPid, ns))
		if err1 != nil || err2 != nil || its == daemon {
			t.Errorf("VMM's %s namespace %q is the daemon's %q (%v %v)", ns, its, daemon, err1, err2)
		}
	}
	var names []string
	filepath.WalkDir(fmt.Sprintf("/proc/%d/root/", pid), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			names = append(names, strings.TrimPrefix(p, fmt.Sprintf("/proc/%d/root", pid)))
		}
		return nil
	})
	sort.Strings(names)
	// Its VM's files: the device, the boot files, the disk, and in /run
	// the sockets it serves (the VMM's control socket, for snapshots, and
	// the vsock socket) and the one it dials for its guest: the daemon's
	// listener for the agent's ready signal (vsock port 1025).
	if got, want := strings.Join(names, " "), "/dev/kvm /initrd /kernel /rootfs.ext4 /run/control.sock /run/vsock.sock /run/vsock.sock_1025"; got != want {
		t.Errorf("the VMM's root holds %q, want only its VM's files %q", got, want)
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if !strings.Contains(string(cg), "/cellvm/"+info.ID) {
		t.Errorf("VMM cgroup %q, want cellvm/%s", cg, info.ID)
	} else {
		dir := filepath.Join("/sys/fs/cgroup/cellvm", info.ID)
		for file, want := range map[string]string{"cpu.max": "250000 100000", "memory.max": fmt.Sprint((384 + 256) << 20), "pids.max": "256"} {
			if b, err := os.ReadFile(filepath.Join(dir, file)); err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s/%s = %q (%v), want %q", dir, file, b, err, want)
			}
		}
	}
	if err := c.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/cellvm", info.ID)); err == nil {
		t.Error("the VMM's cgroup is left after delete")
	}
}

// idlePooled waits for the idle pooled VMM process of the daemon of state
// directory state (its stderr in the pool's directory) and returns its pid
// and its cgroup (cgroup v2's path, /proc/PID/cgroup's "0::" line).
func idlePooled(t *testing.T, state string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, _ := os.ReadFile(p)
			if string(b) != "vmm\x00--pooled\x00" && !strings.HasSuffix(string(b), "\x00vmm\x00--pooled\x00") {
				continue
			}
			var pid int
			fmt.Sscanf(strings.Split(p, "/")[2], "%d", &pid)
			if !stdioPath(pid, func(p string) bool { return strings.HasPrefix(p, filepath.Join(state, "vmm-pool")+"/") }) {
				continue
			}
			cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			for _, line := range strings.Split(string(cg), "\n") {
				if rest, ok := strings.CutPrefix(line, "0::"); ok {
					return pid, rest
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon's pool has no idle VMM process after a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSeccompViolationLosesSandbox makes a jailed VMM issue a system call
// its filter forbids (the test-only trigger, armed by CELLVM_TEST_HOOKS=1,
// fired by SIGUSR2): the process dies and the sandbox reads lost, killed by
// seccomp, in its info.
func TestSeccompViolationLosesSandbox(t *testing.T) {
	kvmtest.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("the jail needs a root daemon")
	}
	t.Setenv("CELLVM_TEST_HOOKS", "1")
	d := startDaemon(t, t.TempDir())
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	if r := mustCell(t, c, info.ID, "1 + 1", 3*time.Minute); r.Status != cell.StatusOK {
		t.Fatalf("first cell: %+v", r)
	}
	pid := vmmOf(t, d.state, info.ID)
	syscall.Kill(pid, syscall.SIGUSR2)
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.Get(ctx, info.ID)
		if err == nil && got.State == sandbox.StateLost {
			if got.Lost == nil || got.Lost.KilledBy != "seccomp" || !strings.Contains(got.Lost.Exit, "bad system call") {
				t.Errorf("lost sandbox says %+v, want killed_by seccomp", got.Lost)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox not lost 30 s after the forbidden system call: %+v %v", got, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(d.log.String(), "killed_by=seccomp") {
		t.Errorf("the daemon's log does not say killed_by=seccomp:\n%s", d.log.String())
	}
}
