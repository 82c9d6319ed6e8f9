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
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 384, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
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
