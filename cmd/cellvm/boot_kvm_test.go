package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/image/initramfs"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// bootTimeout bounds one guest boot; the rig runs under TCG, so it is
// generous, but a hang still fails instead of blocking the suite.
var bootTimeout = bootTimeoutFor(90 * time.Second)

// bootTimeoutFor is def, or $CELLVM_BOOT_TEST_TIMEOUT (a Go duration) when
// set: a shorter bound makes hunting a rare hang with many repeated boots
// affordable.
func bootTimeoutFor(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CELLVM_BOOT_TEST_TIMEOUT")); err == nil && d > 0 {
		return d
	}
	return def
}

// testInit is the /init of the boot tests' initramfs: it prints a marker,
// sleeps a second, prints the uptime, the online CPUs and the boot CPU's
// timer (its clock event device), and reboots,
// which is how a guest without ACPI ends.
const testInit = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
echo CELLVM-BOOT-MARKER
echo UPTIME1 $(/bin/busybox cut -d' ' -f1 /proc/uptime)
/bin/busybox sleep 1
echo UPTIME2 $(/bin/busybox cut -d' ' -f1 /proc/uptime)
echo ONLINE $(/bin/busybox cat /sys/devices/system/cpu/online)
echo NPROC $(/bin/busybox grep -c ^processor /proc/cpuinfo)
echo CLOCKEVENT $(/bin/busybox cat /sys/devices/system/clockevents/clockevent0/current_device)
/bin/busybox reboot -f
`

func testInitramfs(t *testing.T) string {
	t.Helper()
	bb := "/bin/busybox"
	if _, err := os.Stat(bb); err != nil {
		t.Fatalf("busybox-static is needed for the test initramfs: %v (apt-get install busybox-static)", err)
	}
	p := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := initramfs.WriteFile(p, []initramfs.Entry{
		{Path: "bin/busybox", Mode: 0o755, HostPath: bb},
		{Path: "bin/sh", Symlink: "busybox"},
		{Path: "init", Mode: 0o755, Data: []byte(testInit)},
		{Path: "dev", Dir: true},
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// cellvmCmd is this test binary as the cellvm command, until ctx ends.
func cellvmCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	// A hung VMM is asked for its goroutines' stacks first (Go prints
	// them on SIGQUIT): they tell a vCPU stuck inside KVM_RUN (the guest
	// or the emulator) from one stuck in the VMM.
	// Before that, SIGUSR1 has the VMM log each vCPU's registers and exit
	// counts (where the guest is, and whether it still exits at all).
	cmd.Cancel = func() error {
		cmd.Process.Signal(syscall.SIGUSR1)
		time.Sleep(3 * time.Second)
		return cmd.Process.Signal(syscall.SIGQUIT)
	}
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1")
	return cmd
}

// cellvm runs this test binary as the cellvm command.
func cellvm(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	cmd := cellvmCmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("cellvm %v hung: killed after %v\nwhere the vCPUs were:\n%s\nstdout:\n%s\nstderr:\n%s", args, bootTimeout,
			kvmtest.PlaceRIPs(kvmtest.BuildFile(t, "kernel/vmlinux"), errb.String()), out.String(), errb.String())
	}
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("cellvm %v: %v", args, err)
	}
	t.Logf("cellvm %v: exit %d in %v", args, code, time.Since(start).Round(time.Millisecond))
	return out.String(), errb.String(), code
}

func field(t *testing.T, out, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + ` (\S+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("guest did not print %s; console:\n%s", key, out)
	}
	return m[1]
}

func TestBootKernelFormats(t *testing.T) {
	kvmtest.Require(t)
	initrd := testInitramfs(t)
	for _, name := range []string{"vmlinux", "bzImage"} {
		t.Run(name, func(t *testing.T) {
			kernel := kvmtest.BuildFile(t, "kernel/"+name)
			out, errs, code := cellvm(t, "boot", "--kernel", kernel, "--initrd", initrd)
			if code != 0 {
				t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errs)
			}
			if !strings.Contains(out, "CELLVM-BOOT-MARKER") {
				t.Fatalf("marker missing from console:\n%s", out)
			}
			u1, _ := strconv.ParseFloat(field(t, out, "UPTIME1"), 64)
			u2, _ := strconv.ParseFloat(field(t, out, "UPTIME2"), 64)
			if u2-u1 < 0.9 {
				t.Errorf("uptime went from %.2f to %.2f across a 1 s sleep: timers are not running", u1, u2)
			}
			// The VMM offers the TSC-deadline timer whenever KVM has it (as it
			// always does on x86), so the guest needs neither the PIT nor a
			// calibration of its LAPIC timer against it.
			if got := field(t, out, "CLOCKEVENT"); got != "lapic-deadline" {
				t.Errorf("the guest's timer is %q, want lapic-deadline (the TSC-deadline timer)", got)
			}
			if !strings.Contains(errs, "vm ended") {
				t.Errorf("no 'vm ended' log line:\n%s", errs)
			}
		})
	}
}

func TestBootTwoVCPUs(t *testing.T) {
	kvmtest.Require(t)
	out, errs, code := cellvm(t, "boot", "--kernel", kvmtest.BuildFile(t, "kernel/vmlinux"), "--initrd", testInitramfs(t), "--vcpus", "2")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	if got := field(t, out, "NPROC"); got != "2" {
		t.Errorf("guest sees %s CPUs, want 2", got)
	}
	if got := field(t, out, "ONLINE"); got != "0-1" {
		t.Errorf("online CPUs %q, want 0-1", got)
	}
}

// tripleFaultELF is a minimal ELF "kernel" whose entry executes ud2: with
// the boot IDT empty, #UD escalates to a double and then a triple fault.
func tripleFaultELF() []byte {
	le := binary.LittleEndian
	const paddr = 0x1000000
	code := []byte{0x0f, 0x0b} // ud2
	b := make([]byte, 64+56)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1
	le.PutUint16(b[16:], 2)
	le.PutUint16(b[18:], 62)
	le.PutUint64(b[24:], paddr)
	le.PutUint64(b[32:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	p := b[64:]
	le.PutUint32(p, 1)
	le.PutUint64(p[8:], uint64(len(b)))
	le.PutUint64(p[24:], paddr)
	le.PutUint64(p[32:], uint64(len(code)))
	le.PutUint64(p[40:], uint64(len(code)))
	return append(b, code...)
}

func TestBootTripleFaultFails(t *testing.T) {
	kvmtest.Require(t)
	k := filepath.Join(t.TempDir(), "triple.elf")
	if err := os.WriteFile(k, tripleFaultELF(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := cellvm(t, "boot", "--kernel", k)
	if code == 0 {
		t.Fatal("a triple-faulting guest exited 0")
	}
	if !strings.Contains(errs, "triple-fault") {
		t.Errorf("stderr does not say the guest triple-faulted:\n%s", errs)
	}
}

func TestBootGarbageKernelFails(t *testing.T) {
	kvmtest.Require(t)
	k := filepath.Join(t.TempDir(), "garbage")
	if err := os.WriteFile(k, bytes.Repeat([]byte("not a kernel "), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errs, code := cellvm(t, "boot", "--kernel", k)
	if code == 0 || !strings.Contains(errs, "not an x86-64 ELF vmlinux or a bzImage") {
		t.Fatalf("exit %d, stderr:\n%s", code, errs)
	}
}
