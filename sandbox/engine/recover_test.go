package engine

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/control"
)

// gone reports whether process pid has exited (and is reaped, or a zombie
// of ours).
func procGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

func waitProcGone(t *testing.T, pid int, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if procGone(pid) {
			return
		}
	}
	t.Errorf("%s: process %d still runs", what, pid)
}

// TestSweepCgroups: the sweep kills and removes the cgroups of this state
// directory's VMs that no taken-back sandbox owns, whatever runs in them,
// and leaves the owned ones and every other daemon's alone.
func TestSweepCgroups(t *testing.T) {
	parent := testCgroupParent(t)
	for _, n := range []string{"sb-kept", "sb-orphan", "sb-leaked", "sb-other"} {
		if err := os.Mkdir(filepath.Join(parent, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	kept := startInCgroup(t, filepath.Join(parent, "sb-kept"))
	orphan := startInCgroup(t, filepath.Join(parent, "sb-orphan"))
	other := startInCgroup(t, filepath.Join(parent, "sb-other"))
	ours := map[string]bool{"sb-kept": true, "sb-orphan": true, "sb-leaked": true}
	keep := map[string]bool{filepath.Join(parent, "sb-kept"): true}
	swept := sweepCgroups(parent, ours, keep)
	if len(swept) != 2 {
		t.Errorf("swept %v, want sb-orphan and sb-leaked", swept)
	}
	waitProcGone(t, orphan.Process.Pid, "the orphan in its swept cgroup")
	for _, n := range []string{"sb-orphan", "sb-leaked"} {
		if _, err := os.Stat(filepath.Join(parent, n)); err == nil {
			t.Errorf("cgroup %s left after the sweep", n)
		}
	}
	for _, c := range []struct {
		name string
		pid  int
	}{{"sb-kept", kept.Process.Pid}, {"sb-other", other.Process.Pid}} {
		if procGone(c.pid) {
			t.Errorf("the process in %s was killed", c.name)
		}
		if _, err := os.Stat(filepath.Join(parent, c.name)); err != nil {
			t.Errorf("cgroup %s: %v", c.name, err)
		}
	}
}

// TestRestartClosesTheCrashWindows: a daemon that died between starting a
// VMM and recording it, or between making a VM's cgroup and writing its
// spec, leaves a process and a cgroup; the next daemon kills the one and
// removes both cgroups.
func TestRestartClosesTheCrashWindows(t *testing.T) {
	parent := testCgroupParent(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The first daemon, its state directory as the crash left it.
	_, state := newTestManager(t, exe, nil)
	orphanID, leakedID := "sb-0123456789ab", "sb-ba9876543210"
	orphanDir, leakedDir := filepath.Join(state, "sandboxes", orphanID), filepath.Join(state, "sandboxes", leakedID)
	for _, d := range []string{orphanDir, filepath.Join(leakedDir, "jail")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{orphanID, leakedID} {
		if err := os.Mkdir(filepath.Join(parent, id), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := control.Spec{VCPUs: 1, MemoryMiB: 64, Vsock: &control.Vsock{CID: 3, UDS: "/run/vsock.sock"},
		Jail: &jail.Spec{Root: filepath.Join(orphanDir, "jail"), UID: 1000, GID: 1000, Cgroup: filepath.Join(parent, orphanID)}}
	if err := control.WriteSpec(filepath.Join(orphanDir, specFile), spec); err != nil {
		t.Fatal(err)
	}
	orphan := startInCgroup(t, filepath.Join(parent, orphanID)) // started, never recorded

	m, err := NewVMManager(withJail(t, state, exe, parent))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	waitProcGone(t, orphan.Process.Pid, "the VMM orphaned before its record")
	for _, id := range []string{orphanID, leakedID} {
		if _, err := os.Stat(filepath.Join(parent, id)); err == nil {
			t.Errorf("cgroup %s left after the restart", id)
		}
		if _, err := os.Stat(filepath.Join(state, "sandboxes", id)); err == nil {
			t.Errorf("sandbox directory %s left after the restart", id)
		}
	}
}

// withJail is the options of a manager over state with jail options whose
// cgroup parent is parent (what recovery reads of them; nothing is
// jailed).
func withJail(t *testing.T, state, exe, parent string) Options {
	t.Helper()
	dir := filepath.Dir(state)
	return Options{Exe: exe, Kernel: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initramfs.cpio"),
		RootFS: filepath.Join(dir, "rootfs.ext4"), StateDir: state,
		Jail: &JailOptions{UIDBase: 200_000_000, CgroupParent: parent}}
}

// rewriteArgv overwrites the argv of process pid in its memory (the way a
// compromised VMM can overwrite its own), so that /proc/PID/cmdline no
// longer names its spec.
func rewriteArgv(t *testing.T, pid int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	// arg_start and arg_end are fields 48 and 49: the 46th and 47th after
	// the name.
	start, err1 := strconv.ParseInt(string(f[45]), 10, 64)
	end, err2 := strconv.ParseInt(string(f[46]), 10, 64)
	if err1 != nil || err2 != nil || end <= start+1 {
		t.Fatalf("argv of %d: %s %s", pid, f[45], f[46])
	}
	mem, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pid), os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("write another process's memory: %v", err)
	}
	defer mem.Close()
	if _, err := mem.WriteAt(bytes.Repeat([]byte("x"), int(end-start-1)), start); err != nil {
		t.Skipf("write another process's memory: %v", err)
	}
}

// TestRestartAdoptsAVMMThatRewroteItsArgv: a VMM that rewrote its argv is
// still taken back by a restarted daemon (by its record), its sandbox
// runs cells, and a delete leaves no process.
func TestRestartAdoptsAVMMThatRewroteItsArgv(t *testing.T) {
	m, _, _ := newRoleManager(t, "agent", nil)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pid := m.sandboxes[info.ID].proc.pid
	rewriteArgv(t, pid)
	if isVMMFor(pid, filepath.Join(m.sandboxDir(info.ID), specFile)) {
		t.Fatal("the VMM's argv still names its spec after the rewrite")
	}
	abandon(m)

	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if st := stateOf(t, m2, info.ID); st != sandbox.StateRunning {
		t.Fatalf("the sandbox whose VMM rewrote its argv was taken back %s", st)
	}
	if r, err := m2.RunCell(ctx, info.ID, sandbox.Cell{Code: "1 + 1", Timeout: time.Minute}, nil); err != nil || r.Status != cell.StatusOK {
		t.Errorf("a cell after the restart: %+v, %v", r, err)
	}
	if err := m2.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	waitProcGone(t, pid, "the deleted sandbox's VMM")
	if err := syscall.Kill(pid, 0); err == nil && !procGone(pid) {
		t.Errorf("VMM %d still runs after the delete", pid)
	}
}

// TestRestartKillsAnUnrecordedVMM: an unjailed VMM (no cgroup) whose
// daemon died between starting it and recording it is found by its
// stdout, the sandbox's console log, and killed by the next daemon; a
// process writing elsewhere is left alone.
func TestRestartKillsAnUnrecordedVMM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, state := newTestManager(t, exe, nil)
	id := "sb-00000000beef"
	dir := filepath.Join(state, "sandboxes", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	spec := control.Spec{VCPUs: 1, MemoryMiB: 64, Vsock: &control.Vsock{CID: 3, UDS: filepath.Join(dir, vsockFile)}}
	if err := control.WriteSpec(filepath.Join(dir, specFile), spec); err != nil {
		t.Fatal(err)
	}
	startWritingTo := func(path string) *exec.Cmd {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd := exec.Command("sleep", "600")
		cmd.Stdout = f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait()
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd
	}
	orphan := startWritingTo(filepath.Join(dir, consoleFile))
	bystander := startWritingTo(filepath.Join(t.TempDir(), consoleFile))

	m2, err := NewVMManager(m.opt)
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	waitProcGone(t, orphan.Process.Pid, "the unrecorded VMM")
	if procGone(bystander.Process.Pid) {
		t.Error("a process writing elsewhere was killed")
	}
	if _, err := os.Stat(dir); err == nil {
		t.Error("the unrecorded VMM's sandbox directory is left")
	}
}
