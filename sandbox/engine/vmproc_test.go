package engine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/control"
)

func init() {
	// The fake VMMs are this test binary, told their role by these; the
	// fake builder runs mkfs.ext4 itself (a real VMM runs nothing).
	vmmTestEnv = func() []string {
		var env []string
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "CELLVM_TEST_") || strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		return env
	}
}

// isVMMFor reports whether pid's command line is the VMM's of the spec at
// cfg (control.IsVMM): the tests' look at a process, never the daemon's.
func isVMMFor(pid int, cfg string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && control.IsVMM(b, cfg)
}

// TestVMMEnvIsClean: a VMM's environment is exactly vmmEnv, whatever the
// daemon's holds.
func TestVMMEnvIsClean(t *testing.T) {
	saved := vmmTestEnv
	vmmTestEnv = nil
	defer func() { vmmTestEnv = saved }()
	t.Setenv("CELLVM_TOKEN", "secret")
	t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
	cmd := vmmCommand("/bin/cellvm", "/state/sb-x/vmm.json", vmStart{})
	if want := []string{"GODEBUG=updatemaxprocs=0"}; !slices.Equal(cmd.Env, want) {
		t.Errorf("the VMM's environment: %q, want exactly %q", cmd.Env, want)
	}
	if want := []string{"/bin/cellvm", control.Command, "--config", "/state/sb-x/vmm.json"}; !slices.Equal(cmd.Args, want) {
		t.Errorf("the VMM's argv: %q, want %q", cmd.Args, want)
	}
	if !cmd.SysProcAttr.Setsid || cmd.SysProcAttr.Cloneflags != 0 || cmd.SysProcAttr.UseCgroupFD {
		t.Errorf("an unjailed VMM's attributes: %+v", cmd.SysProcAttr)
	}
}

func TestStatStartTime(t *testing.T) {
	// Fields 3..22 after the name; starttime is the last here.
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 19 20"
	for _, name := range []string{"cellvm", "a) b (c", ") 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22", ""} {
		got, err := statStartTime([]byte(fmt.Sprintf("77 (%s)%s\n", name, tail)))
		if err != nil || got != 424242 {
			t.Errorf("comm %q: %d, %v; want 424242", name, got, err)
		}
	}
	for _, bad := range []string{"", "77 cellvm S 1", "77 (x) S 1 2", "77 (x)" + strings.Replace(tail, "424242", "-1", 1), "77 (x)" + strings.Replace(tail, "424242", "0", 1)} {
		if got, err := statStartTime([]byte(bad)); err == nil {
			t.Errorf("stat %q: %d, want an error", bad, got)
		}
	}
	// Ours, for real.
	if st, err := procStartTime(os.Getpid()); err != nil || st == 0 {
		t.Errorf("our own start time: %d, %v", st, err)
	}
}

// startSleeper starts a child process that sleeps, and reaps it at the
// end of the test.
func startSleeper(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-waited })
	return cmd
}

// TestAdoptByRecord: a VMM is adopted by its record (pid and start time),
// whatever its argv says; a record whose start time is not the process's
// (its pid reused) or whose cgroup does not hold it is refused, and the
// process it names is left alone; an adopted process is stopped through
// its pidfd, and its exit seen.
func TestAdoptByRecord(t *testing.T) {
	dir := t.TempDir()
	if _, err := adoptVM(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("adopt without a record: %v", err)
	}
	for _, bad := range []string{`{"pid":1,"start_time":5}`, `{"pid":77}`, `not json`, strings.Repeat(" ", maxProcRecord+1)} {
		os.WriteFile(filepath.Join(dir, procFile), []byte(bad), 0o600)
		if _, err := adoptVM(dir); err == nil {
			t.Errorf("adopted by the record %.40q", bad)
		}
	}

	sleeper := startSleeper(t)
	pid := sleeper.Process.Pid
	start, err := procStartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	// A pid reused: the record's start time is another process's.
	if err := recordProc(dir, procRecord{PID: pid, StartTime: start + 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := adoptVM(dir); !errors.Is(err, errNotRecorded) {
		t.Errorf("adopt a reused pid: %v, want errNotRecorded", err)
	}
	// Not in the cgroup the record names.
	fakeCg := t.TempDir()
	os.WriteFile(filepath.Join(fakeCg, "cgroup.procs"), []byte("12345\n"), 0o600)
	recordProc(dir, procRecord{PID: pid, StartTime: start, Cgroup: fakeCg})
	if _, err := adoptVM(dir); !errors.Is(err, errNotRecorded) {
		t.Errorf("adopt a process outside its recorded cgroup: %v, want errNotRecorded", err)
	}
	if sleeper.ProcessState != nil || syscall.Kill(pid, 0) != nil {
		t.Fatal("a refused adoption touched the process")
	}
	// Its own record, its cgroup holding it: adopted, though its argv is
	// `sleep 600` and no VMM's.
	os.WriteFile(filepath.Join(fakeCg, "cgroup.procs"), []byte(fmt.Sprintf("12345\n%d\n", pid)), 0o600)
	recordProc(dir, procRecord{PID: pid, StartTime: start, Cgroup: fakeCg})
	p, err := adoptVM(dir)
	if err != nil {
		t.Fatalf("adopt by the record: %v", err)
	}
	if p.pidfd == nil {
		t.Log("no pidfd on this kernel: the adopted process is watched by its stat")
	}
	select {
	case <-p.done:
		t.Fatal("the adopted process reads exited while it runs")
	case <-time.After(300 * time.Millisecond):
	}
	p.stop(5 * time.Second)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the adopted process's exit was not seen")
	}
	if p.err != errAdoptedExited {
		t.Errorf("the adopted process's exit: %v", p.err)
	}
	// Gone (a zombie of ours until reaped, then nothing): not adopted.
	time.Sleep(100 * time.Millisecond)
	if _, err := adoptVM(dir); err == nil {
		t.Error("adopted a process that is gone")
	}
}

// TestSpawnRecordsTheProcess: a VMM started is recorded with its pid and
// start time before spawnVMM returns, and no pid file naming it by argv.
func TestSpawnRecordsTheProcess(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(t.TempDir(), "vmm")
	os.WriteFile(exe, []byte("#!/bin/sh\nexec sleep 600\n"), 0o700)
	p, err := spawnVMM(exe, dir, vmStart{spec: control.Spec{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { p.kill(); <-p.done }()
	rec, err := readProcRecord(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := procStartTime(p.pid); rec.PID != p.pid || rec.StartTime != st || rec.Cgroup != "" {
		t.Errorf("the record %+v; want pid %d, start time %d, no cgroup", rec, p.pid, st)
	}
}

// testCgroupParent makes a cgroup v2 directory for the test under the
// host's, or skips the test where none is writable.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	for _, root := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if !jail.CgroupV2(root) {
			continue
		}
		dir := filepath.Join(root, fmt.Sprintf("cellvm-test-%d-%d", os.Getpid(), time.Now().UnixNano()))
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		t.Cleanup(func() {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() {
					jail.CgroupAt(filepath.Join(dir, e.Name())).Close()
				}
			}
			os.Remove(dir)
		})
		return dir
	}
	t.Skip("no writable cgroup v2 hierarchy here")
	return ""
}

// startInCgroup starts a sleeping child in the cgroup at path.
func startInCgroup(t *testing.T, path string) *exec.Cmd {
	t.Helper()
	d, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(d.Fd())}
	if err := cmd.Start(); err != nil {
		t.Skipf("clone into a cgroup: %v", err)
	}
	go cmd.Wait()
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd
}
