package interp

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// The cgroup files are parsed from a plain directory here; the real cgroup
// is exercised by TestOOMKillInCgroup where the host allows it.
func TestCgroupFileParsing(t *testing.T) {
	dir := t.TempDir()
	cg := &cgroup{dir: dir}
	if n := cg.oomKills(); n != 0 {
		t.Errorf("oomKills with no file = %d", n)
	}
	events := "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	if err := os.WriteFile(filepath.Join(dir, "memory.events"), []byte(events), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := cg.oomKills(); n != 2 {
		t.Errorf("oomKills = %d, want 2", n)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte("12\n345\nbogus\n-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := cg.procs(); !slices.Equal(got, []int{12, 345}) {
		t.Errorf("procs = %v", got)
	}
	if _, err := newCgroup(dir, "interp-", 1<<20, 0); err == nil {
		t.Error("newCgroup accepted a directory that is not on cgroup2")
	}
}

func TestReadProcStatOddNames(t *testing.T) {
	// A command name with spaces and parentheses must not shift the fields.
	odd := filepath.Join(t.TempDir(), "x) S 1 (y")
	if err := os.Symlink("/bin/sleep", odd); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(odd, "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	p, ok := readProcStat(cmd.Process.Pid)
	if !ok || p.pid != cmd.Process.Pid || p.ppid != os.Getpid() || p.pgrp != syscall.Getpgrp() {
		t.Errorf("readProcStat = %+v, %v; want ppid %d pgrp %d", p, ok, os.Getpid(), syscall.Getpgrp())
	}
	if _, ok := readProcStat(-5); ok {
		t.Error("readProcStat(-5) succeeded")
	}
}
