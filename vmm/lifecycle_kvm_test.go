package vmm

import (
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/image/initramfs"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/test/netnstest"
)

// busyboxGuest writes an initramfs whose /init is the given busybox script.
func busyboxGuest(t *testing.T, init string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "initramfs.cpio")
	err := initramfs.WriteFile(p, []initramfs.Entry{
		{Path: "bin/busybox", Mode: 0o755, HostPath: "/bin/busybox"},
		{Path: "bin/sh", Symlink: "busybox"},
		{Path: "init", Mode: 0o755, Data: []byte(init)},
		{Path: "dev", Dir: true}, {Path: "proc", Dir: true}, {Path: "sys", Dir: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// console collects the serial output and tells who waits for a line.
type console struct {
	mu    sync.Mutex
	b     strings.Builder
	lines chan string
	line  []byte
}

func newConsole() *console { return &console{lines: make(chan string, 1024)} }

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.b.Write(p)
	for _, x := range p {
		if x != '\n' {
			c.line = append(c.line, x)
			continue
		}
		select {
		case c.lines <- strings.TrimRight(string(c.line), "\r"):
		default:
		}
		c.line = c.line[:0]
	}
	return len(p), nil
}

func (c *console) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// runGuest boots init on the test kernel and returns the console and
// Run's error.
func runGuest(t *testing.T, init string, cfg Config) (string, error) {
	t.Helper()
	con := newConsole()
	cfg.Kernel = kvmtest.BuildFile(t, "kernel/vmlinux")
	cfg.Initrd = busyboxGuest(t, init)
	cfg.Console = con
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = 128
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	errc := make(chan error, 1)
	go func() { errc <- m.Run() }()
	select {
	case err := <-errc:
		return con.String(), err
	case <-time.After(3 * time.Minute):
		m.Stop()
		<-errc
		t.Fatalf("the guest did not end; its console:\n%s", con.String())
	}
	return "", nil
}

// TestConsoleTextNeverEndsTheVM: a guest whose code prints the kernel's
// power-off and panic messages (to /dev/kmsg and to the console) keeps
// running, and its reboot afterwards is a clean end, not a panic.
func TestConsoleTextNeverEndsTheVM(t *testing.T) {
	kvmtest.Require(t)
	out, err := runGuest(t, `#!/bin/busybox sh
/bin/busybox mount -t devtmpfs dev /dev
echo "reboot: Power down" > /dev/kmsg
echo "Kernel panic - not syncing: a cell printed this" > /dev/kmsg
echo "reboot: Power down"
echo "Kernel panic - not syncing: a cell printed this too"
/bin/busybox sleep 1
echo STILL-HERE
/bin/busybox reboot -f
`, Config{})
	if err != nil {
		t.Errorf("Run = %v after the guest printed panic and power-off text and rebooted; want nil (a clean reset)", err)
	}
	if !strings.Contains(out, "STILL-HERE") {
		t.Errorf("the guest did not keep running after printing \"reboot: Power down\":\n%s", out)
	}
}

// TestKernelPanicIsToldByTheWarmBootFlag: a real panic (PID 1 exits)
// ends the VM with ErrKernelPanic, from the flag the kernel sets before
// its reset, not from its console.
func TestKernelPanicIsToldByTheWarmBootFlag(t *testing.T) {
	kvmtest.Require(t)
	out, err := runGuest(t, "#!/bin/busybox sh\necho INIT-EXITS\nexit 3\n", Config{})
	if !errors.Is(err, ErrKernelPanic) {
		t.Errorf("Run = %v after PID 1 exited (a kernel panic); want ErrKernelPanic\n%s", err, out)
	}
	if !strings.Contains(out, "INIT-EXITS") {
		t.Errorf("the guest's init did not run:\n%s", out)
	}
}

// TestStopWhileRunStartsVCPUs: the host stopping the VM while Run is
// still creating vCPUs is no race (run with -race) and ends the VM.
func TestStopWhileRunStartsVCPUs(t *testing.T) {
	kvmtest.Require(t)
	m, err := New(Config{Kernel: kvmtest.BuildFile(t, "kernel/vmlinux"), Initrd: busyboxGuest(t, "#!/bin/busybox sh\n/bin/busybox sleep 1000\n"),
		VCPUs: 4, MemoryMiB: 128, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	go m.Stop()
	if err := m.Run(); err != nil {
		t.Fatalf("Run = %v after Stop, want nil", err)
	}
}

// TestTAPTeardownHasOneOwner boots a guest with a virtio-net TAP, stops
// it from the host, and closes the machine twice, as deleting a sandbox
// with network does: no panic (the TAP device used to be closed by its
// transport and by the machine), no race (run with -race). It runs in a
// network namespace of its own, where it may make TAPs.
func TestTAPTeardownHasOneOwner(t *testing.T) {
	kvmtest.Require(t)
	if !netnstest.Isolate(t) {
		return
	}
	con := newConsole()
	tap, err := netpolicy.OpenTAP("cvtap0")
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Kernel: kvmtest.BuildFile(t, "kernel/vmlinux"),
		Initrd: busyboxGuest(t, "#!/bin/busybox sh\n/bin/busybox mount -t sysfs sys /sys\n/bin/busybox ip link set eth0 up\necho NET-UP $(/bin/busybox cat /sys/class/net/eth0/address)\n/bin/busybox sleep 1000\n"),
		VCPUs:  2, MemoryMiB: 128, TAP: tap, MAC: [6]byte{0x02, 0xce, 0x11, 0, 0, 1},
		Console: con, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- m.Run() }()
	for up := false; !up; {
		select {
		case l := <-con.lines:
			up = strings.HasPrefix(l, "NET-UP")
			if up && l != "NET-UP 02:ce:11:00:00:01" {
				t.Errorf("guest NIC: %q", l)
			}
		case err := <-errc:
			t.Fatalf("the guest ended before its network was up: %v\n%s", err, con.String())
		case <-time.After(3 * time.Minute):
			t.Fatalf("the guest's network did not come up:\n%s", con.String())
		}
	}
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); m.Stop() }()
	}
	if err := <-errc; err != nil {
		t.Errorf("Run = %v after Stop, want nil", err)
	}
	wg.Wait()
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if out, err := exec.Command("ip", "link", "show", "cvtap0").CombinedOutput(); err == nil {
		t.Errorf("the TAP outlived the machine's Close:\n%s", out)
	}
}
