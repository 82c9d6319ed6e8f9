package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/vmm/control"
)

// TestRestartFindsAVMMThatRewroteItsArgv: a VMM that rewrote its argv
// (the test hook, armed by CELLVM_TEST_HOOKS=1, fired by SIGWINCH) no
// longer names its spec in /proc/PID/cmdline; after a kill -9 of the
// daemon and a restart, the new daemon still takes it back by its record
// (pid, start time, cgroup), and a delete leaves no process and no
// cgroup.
func TestRestartFindsAVMMThatRewroteItsArgv(t *testing.T) {
	kvmtest.Require(t)
	t.Setenv("CELLVM_TEST_HOOKS", "1")
	dir := t.TempDir()
	d := startDaemon(t, dir)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 384, Labels: map[string]string{"suite": "adopt"}})
	if err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	mustCell(t, c, info.ID, "survivor = 7", time.Minute)
	// Its labels and a TTL set after its creation are kept across the
	// restart too (issue 26).
	set, err := c.SetTTL(ctx, info.ID, 2*time.Hour)
	if err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	pid := vmmOf(t, d.state, info.ID)
	spec, err := control.ReadSpec(filepath.Join(d.state, "sandboxes", info.ID, "vmm.json"))
	if err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	cgroup := ""
	if spec.Jail != nil {
		cgroup = spec.Jail.Cgroup
	}
	syscall.Kill(pid, syscall.SIGWINCH)
	for deadline := time.Now().Add(10 * time.Second); len(vmmProcesses(d.state)) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			d.stop(t)
			t.Fatalf("the VMM's argv after the hook: %q", cmdlineOf(pid))
		}
	}
	d.cmd.Process.Kill() // kill -9 of the daemon
	d.cmd.Wait()
	os.Remove(d.socket)

	d2 := startDaemon(t, dir)
	defer d2.stop(t)
	c2 := api.NewClient(d2.socket)
	got, err := c2.Get(ctx, info.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("the restarted daemon did not take back the VMM that rewrote its argv: %+v %v\n%s", got, err, d2.log.String())
	}
	if v := text(mustCell(t, c2, info.ID, "survivor", time.Minute)); v != "7" {
		t.Errorf("the taken-back sandbox's state: %q", v)
	}
	if got.Config.Labels["suite"] != "adopt" || got.Config.TTL != set.Config.TTL {
		t.Errorf("taken back with labels %v and TTL %v; want suite=adopt and %v", got.Config.Labels, got.Config.TTL, set.Config.TTL)
	}
	lr, err := c2.ListPage(ctx, api.ListQuery{Filter: sandbox.ListFilter{Labels: map[string]string{"suite": "adopt"}, States: []sandbox.State{sandbox.StateRunning}}})
	if err != nil || len(lr.Sandboxes) != 1 || lr.Sandboxes[0].ID != info.ID {
		t.Errorf("ls -l suite=adopt --state running after the restart: %+v %v", lr, err)
	}
	if err := c2.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil && !strings.Contains(statState(pid), "Z") {
		t.Errorf("VMM %d still runs after the delete: %q", pid, cmdlineOf(pid))
	}
	if cgroup != "" {
		if _, err := os.Stat(cgroup); err == nil {
			t.Errorf("the VMM's cgroup %s is left after the delete", cgroup)
		}
	}
}

func cmdlineOf(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return string(b)
}

// statState is the state field of /proc/PID/stat ("" when it is gone).
func statState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 {
		return s[i+2 : i+3]
	}
	return ""
}
