package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/vmm/control"
)

// snapInit is the /init of the snapshot tests: it counts ticks, each with
// the guest's uptime, and reboots after the last. A snapshot taken while it
// counts must carry on counting where it stopped, with the uptime going on
// from where it was.
const snapInit = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc
/bin/busybox mount -t proc proc /proc
echo CELLVM-SNAP-READY
i=0
while [ $i -lt 30 ]; do
	i=$((i+1))
	echo TICK $i $(/bin/busybox cut -d' ' -f1 /proc/uptime)
	/bin/busybox usleep 300000
done
echo CELLVM-SNAP-DONE
/bin/busybox reboot -f
`

const lastTick = 30

// console is a running `cellvm boot` whose console the test reads as it
// comes.
type console struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	lines  chan string
	stderr bytes.Buffer
	once   sync.Once
	done   chan struct{}
}

func startBoot(t *testing.T, args ...string) *console {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	t.Cleanup(cancel)
	c := &console{lines: make(chan string, 1024), done: make(chan struct{})}
	c.cmd = cellvmCmd(ctx, append([]string{"boot"}, args...)...)
	c.cmd.Stderr = &c.stderr
	pipe, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.lines)
		r := bufio.NewReader(pipe)
		for {
			line, err := r.ReadString('\n')
			c.mu.Lock()
			c.out.WriteString(line)
			c.mu.Unlock()
			if line != "" {
				select {
				case c.lines <- strings.TrimRight(line, "\r\n"):
				default:
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.wait()
	})
	return c
}

// wait returns a channel closed when the process has ended.
func (c *console) wait() <-chan struct{} {
	c.once.Do(func() {
		go func() {
			c.cmd.Wait()
			close(c.done)
		}()
	})
	return c.done
}

func (c *console) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// waitLine waits for a console line starting with prefix.
func (c *console) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(bootTimeout)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				t.Fatalf("console ended before %q\nconsole:\n%s\nstderr:\n%s", prefix, c.text(), c.stderr.String())
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no %q on the console\nconsole:\n%s", prefix, c.text())
		}
	}
}

// exit waits for the process and returns its exit code.
func (c *console) exit(t *testing.T) int {
	t.Helper()
	<-c.wait()
	if c.cmd.ProcessState == nil {
		t.Fatal("process did not end")
	}
	return c.cmd.ProcessState.ExitCode()
}

type tick struct {
	n      int
	uptime float64
}

var tickLine = regexp.MustCompile(`(?m)^TICK (\d+) (\d+\.\d+)\r?$`)

func ticks(out string) []tick {
	var ts []tick
	for _, m := range tickLine.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		u, _ := strconv.ParseFloat(m[2], 64)
		ts = append(ts, tick{n, u})
	}
	return ts
}

// checkCarriesOn checks that after has the ticks following before's last
// one, in order, to the end, with the uptime going on from before's.
func checkCarriesOn(t *testing.T, name string, before, after []tick, out string) {
	t.Helper()
	if len(before) == 0 || len(after) == 0 {
		t.Fatalf("%s: %d ticks before the snapshot, %d after\nconsole:\n%s", name, len(before), len(after), out)
	}
	last := before[len(before)-1]
	// The snapshot may have caught one tick half printed.
	if first := after[0].n; first != last.n+1 && first != last.n+2 {
		t.Errorf("%s: the ticks went on at %d after %d", name, first, last.n)
	}
	for i, tk := range after {
		if i > 0 && (tk.n != after[i-1].n+1 || tk.uptime <= after[i-1].uptime) {
			t.Errorf("%s: tick %+v after %+v: the guest does not count on", name, tk, after[i-1])
		}
	}
	if after[0].uptime < last.uptime {
		t.Errorf("%s: uptime %.2f after the snapshot, %.2f before: the guest clock went back", name, after[0].uptime, last.uptime)
	}
	if end := after[len(after)-1]; end.n != lastTick || end.uptime-after[0].uptime < 0.2*float64(end.n-after[0].n) {
		t.Errorf("%s: last tick %+v after %+v: the guest's timers do not run", name, end, after[0])
	}
	if !strings.Contains(out, "CELLVM-SNAP-DONE") {
		t.Errorf("%s: the guest did not finish\nconsole:\n%s", name, out)
	}
}

// TestBootSnapshotRestore boots a two-vCPU guest, snapshots it through the
// VMM's control socket while it counts, and lets it carry on; then a new
// process restores the snapshot. Both go on counting from the tick the
// snapshot caught, with their clocks going on, to the end.
func TestBootSnapshotRestore(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "control.sock")
	orig := startBoot(t, "--kernel", kvmtest.BuildFile(t, "kernel/vmlinux"), "--initrd", busyboxInitramfs(t, snapInit, false), "--vcpus", "2", "--control", sock)
	orig.waitLine(t, "TICK 3 ")

	state, err := os.Create(filepath.Join(dir, "vm.state"))
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Create(filepath.Join(dir, "vm.mem"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := control.Snapshot(ctx, sock, state, mem, control.ThenResume); err != nil {
		t.Fatalf("snapshot: %v\nstderr:\n%s", err, orig.stderr.String())
	}
	t.Logf("snapshot taken in %v", time.Since(start).Round(time.Millisecond))
	atSnapshot := ticks(orig.text())
	state.Close()
	mem.Close()

	if code := orig.exit(t); code != 0 {
		t.Fatalf("the snapshotted VM exited %d\nconsole:\n%s\nstderr:\n%s", code, orig.text(), orig.stderr.String())
	}
	all := ticks(orig.text())
	checkCarriesOn(t, "the VM that was snapshotted", atSnapshot, all[len(atSnapshot):], orig.text())
	if !strings.Contains(orig.stderr.String(), "vm paused") || !strings.Contains(orig.stderr.String(), "snapshot saved") {
		t.Errorf("the VMM's log does not show the pause and the save:\n%s", orig.stderr.String())
	}

	out, errs, code := cellvm(t, "boot", "--restore-state", state.Name(), "--restore-memory", mem.Name())
	if code != 0 {
		t.Fatalf("the restored VM exited %d\nconsole:\n%s\nstderr:\n%s", code, out, errs)
	}
	if strings.Contains(out, "CELLVM-SNAP-READY") {
		t.Errorf("the restored VM booted again:\n%s", out)
	}
	checkCarriesOn(t, "the restored VM", atSnapshot, ticks(out), out)
	if !strings.Contains(errs, "resumed from a snapshot") {
		t.Errorf("the restored VMM's log does not say it resumed:\n%s", errs)
	}
}

// TestBootRestoreRefusesBadSnapshot: a restore from a state file that is not
// one, or with the wrong memory file, fails with an error that says why.
func TestBootRestoreRefusesBadSnapshot(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	if err := os.WriteFile(garbage, []byte("not a snapshot at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, errs, code := cellvm(t, "boot", "--restore-state", garbage, "--restore-memory", garbage)
	if code == 0 || !strings.Contains(errs, "not a cellvm state file") {
		t.Errorf("restore from garbage: exit %d\n%s", code, errs)
	}
	_, errs, code = cellvm(t, "boot", "--restore-state", filepath.Join(dir, "missing"), "--restore-memory", garbage)
	if code == 0 || !strings.Contains(errs, "state file") {
		t.Errorf("restore from a missing file: exit %d\n%s", code, errs)
	}
}
