package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// fakeVMM writes a shell script that stands in for `cellvm vmm`: the
// manager's boot path and its cleanup run for real, with no KVM.
func fakeVMM(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-cellvm")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newFakeManager(t *testing.T, exe string, boot time.Duration) (*VMManager, string) {
	t.Helper()
	return newTestManager(t, exe, func(o *Options) { o.BootTimeout = boot })
}

// newTestManager returns a manager over empty guest files whose VMM is exe,
// with opt applied to its options, and its state directory.
func newTestManager(t *testing.T, exe string, opt func(*Options)) (*VMManager, string) {
	t.Helper()
	// A short directory: a vsock socket's path under it must fit sun_path.
	dir, err := os.MkdirTemp("", "sb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, f := range []string{"vmlinux", "initramfs.cpio", "rootfs.ext4"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{
		Exe: exe, Kernel: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initramfs.cpio"),
		RootFS: filepath.Join(dir, "rootfs.ext4"), StateDir: filepath.Join(dir, "state"),
	}
	if opt != nil {
		opt(&o)
	}
	m, err := NewVMManager(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, o.StateDir
}

// assertNothingLeft checks that a failed create left no sandbox behind: no
// entry, no directory, no process whose arguments name the state directory.
func assertNothingLeft(t *testing.T, m *VMManager, state string) {
	t.Helper()
	if l, _ := m.List(context.Background()); len(l) != 0 {
		t.Errorf("sandboxes listed after a failed create: %+v", l)
	}
	if d, _ := filepath.Glob(filepath.Join(state, "sandboxes", "*")); len(d) != 0 {
		t.Errorf("sandbox directories left: %v", d)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), state) {
			t.Errorf("process left behind: %s: %q", p, b)
		}
	}
}

func TestCreateReportsAVMThatExitsWhileBooting(t *testing.T) {
	m, state := newFakeManager(t, fakeVMM(t, `echo "open /dev/kvm: no such file or directory" >&2; exit 1`), time.Minute)
	start := time.Now()
	_, err := m.Create(context.Background(), sandbox.Config{})
	if err == nil {
		t.Fatal("create succeeded with a VMM that exits at once")
	}
	msg := err.Error()
	if !strings.Contains(msg, "the VM exited while booting") || !strings.Contains(msg, "open /dev/kvm") {
		t.Errorf("error does not say the VM exited and why: %v", err)
	}
	if strings.Contains(msg, "did not answer within") {
		t.Errorf("error blames a timeout for a VM that exited: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("create waited %v for a VM that had already exited", d)
	}
	assertNothingLeft(t, m, state)
}

func TestCreateGivesUpOnASilentGuest(t *testing.T) {
	// The VMM runs but no agent ever answers on its vsock socket.
	m, state := newFakeManager(t, fakeVMM(t, `while :; do sleep 1; done`), time.Second)
	_, err := m.Create(context.Background(), sandbox.Config{})
	if err == nil {
		t.Fatal("create succeeded with no agent")
	}
	if !strings.Contains(err.Error(), "did not answer within 1s") {
		t.Errorf("error does not name the boot timeout: %v", err)
	}
	assertNothingLeft(t, m, state)
}
