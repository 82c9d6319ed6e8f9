package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agentclient"
	"github.com/cellvm/cellvm/image/initramfs"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// busyboxInitramfs writes an initramfs with busybox, the given /init
// script and, when withSelf, this test binary as /bin/guest.
func busyboxInitramfs(t *testing.T, init string, withSelf bool) string {
	t.Helper()
	entries := []initramfs.Entry{
		{Path: "bin/busybox", Mode: 0o755, HostPath: "/bin/busybox"},
		{Path: "bin/sh", Symlink: "busybox"},
		{Path: "init", Mode: 0o755, Data: []byte(init)},
		{Path: "dev", Dir: true}, {Path: "proc", Dir: true}, {Path: "sys", Dir: true},
	}
	if withSelf {
		entries = append(entries, initramfs.Entry{Path: "bin/guest", Mode: 0o755, HostPath: os.Args[0]})
	}
	p := filepath.Join(t.TempDir(), "initramfs.cpio")
	if err := initramfs.WriteFile(p, entries); err != nil {
		t.Fatal(err)
	}
	return p
}

func mkfsExt4(t *testing.T, img string, sizeMiB int, from string) {
	t.Helper()
	args := []string{"-q", "-F", "-t", "ext4", "-O", "^has_journal"}
	if from != "" {
		args = append(args, "-d", from)
	}
	args = append(args, img, fmt.Sprintf("%dM", sizeMiB))
	if out, err := exec.Command("mkfs.ext4", args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
}

const diskInit = `#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t devtmpfs dev /dev
$bb mkdir -p /a /b
$bb mount -t ext4 -o ro /dev/vda /a && echo MOUNTED-RO
echo SHA $($bb sha256sum /a/data.bin | $bb cut -d' ' -f1)
$bb mount -t ext4 /dev/vdb /b && echo MOUNTED-RW
echo written-by-guest > /b/written.txt
$bb sync
$bb umount /b && echo UNMOUNTED-RW
if $bb dd if=/dev/zero of=/dev/vda bs=4096 count=1 conv=fsync 2>/dev/null; then echo ROWRITE succeeded; else echo ROWRITE failed; fi
$bb reboot -f
`

func TestVirtioBlock(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	os.Mkdir(data, 0o755)
	content := pattern(64<<20, 42)
	if err := os.WriteFile(filepath.Join(data, "data.bin"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(content)
	want := hex.EncodeToString(h[:])
	ro, rw := filepath.Join(dir, "ro.img"), filepath.Join(dir, "rw.img")
	mkfsExt4(t, ro, 80, data)
	mkfsExt4(t, rw, 16, "")
	roBefore, _ := os.ReadFile(ro)
	out, errs, code := cellvm(t, "boot", "--kernel", kvmtest.BuildFile(t, "kernel/vmlinux"),
		"--initrd", busyboxInitramfs(t, diskInit, false), "--disk", ro+",ro", "--disk", rw, "--memory", "256")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, s := range []string{"MOUNTED-RO", "MOUNTED-RW", "UNMOUNTED-RW"} {
		if !strings.Contains(out, s) {
			t.Errorf("guest did not print %s", s)
		}
	}
	if got := field(t, out, "SHA"); got != want {
		t.Errorf("guest sha256 %s, host %s", got, want)
	}
	if got := field(t, out, "ROWRITE"); got != "failed" {
		t.Errorf("a write to the read-only disk %s", got)
	}
	roAfter, _ := os.ReadFile(ro)
	if sha256.Sum256(roAfter) != sha256.Sum256(roBefore) {
		t.Error("the read-only disk image changed")
	}
	cat, err := exec.Command("debugfs", "-R", "cat /written.txt", rw).Output()
	if err != nil || strings.TrimSpace(string(cat)) != "written-by-guest" {
		t.Errorf("the guest's write is not on the host file: %q %v", cat, err)
	}
	if t.Failed() {
		t.Logf("console:\n%s", out)
	}
}

const vsockInit = `#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev
CELLVM_TEST_GUEST=vsock /bin/guest
echo GUEST-EXITED $?
/bin/busybox reboot -f
`

func TestVirtioVsock(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	uds := filepath.Join(dir, "v.sock")
	// The host echo service the guest dials (Firecracker: <uds>_<port>).
	hostLn, err := net.Listen("unix", fmt.Sprintf("%s_%d", uds, hostEchoPort))
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			go echo(c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "boot", "--kernel", kvmtest.BuildFile(t, "kernel/vmlinux"),
		"--initrd", busyboxInitramfs(t, vsockInit, true), "--vsock", "3,"+uds, "--memory", "512", "--vcpus", "2")
	cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1")
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("vmm log:\n%s", stderr.String())
		}
	}()
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var console []string
	waitFor := func(prefix string) string {
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("console ended before %q; its end:\n%s", prefix, lastN(console, 40))
				}
				console = append(console, l)
				if strings.HasPrefix(l, prefix) {
					return l
				}
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %q; the console's end:\n%s", prefix, lastN(console, 40))
			}
		}
	}
	waitFor("GUEST-LISTENING")

	// Host to guest, bulk.
	dial := func(port uint32) (net.Conn, error) {
		dctx, dcancel := context.WithTimeout(ctx, 60*time.Second)
		defer dcancel()
		return agentclient.DialVsock(dctx, uds, port)
	}
	c, err := dial(guestEchoPort)
	if err != nil {
		t.Fatalf("host connect to guest: %v", err)
	}
	start := time.Now()
	if err := roundTrip(c, pattern(vsockBulk, 9)); err != nil {
		t.Errorf("host-to-guest 16 MiB: %v", err)
	}
	t.Logf("host-to-guest 16 MiB echoed in %v", time.Since(start).Round(time.Millisecond))

	// Host to guest, 64 at once.
	var wg sync.WaitGroup
	errc := make(chan error, vsockConns)
	for i := 0; i < vsockConns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := dial(guestEchoPort)
			if err == nil {
				err = roundTrip(c, pattern(32<<10, byte(i)))
			}
			if err != nil {
				errc <- fmt.Errorf("conn %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Errorf("host-to-guest concurrent: %v", err)
	}

	// Nobody listens on the guest port: the connect must fail, quickly.
	start = time.Now()
	if c, err := dial(guestEchoPort + 1); err == nil {
		c.Close()
		t.Error("connected to a guest port nobody listens on")
	} else if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refused connect took %v", d)
	}

	done := waitFor("GUEST-DONE")
	for _, l := range console {
		if strings.HasPrefix(l, "GUEST-FAIL") {
			t.Error(l)
		}
	}
	if done != "GUEST-DONE ok" {
		t.Errorf("guest side: %s", done)
	}
}

// lastN joins the last n lines.
func lastN(lines []string, n int) string {
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
