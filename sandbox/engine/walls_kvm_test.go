package engine

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/consolelog"
)

// TestConsoleTextDoesNotEndASandbox: a cell that writes the kernel's
// power-off and panic messages to /dev/kmsg and the console leaves its
// sandbox running, and the next cell answers. (The VM used to end on
// "reboot: Power down" and report a panic on "Kernel panic".)
func TestConsoleTextDoesNotEndASandbox(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := runCell(t, m, info.ID, `
written = []
for dev in ("/dev/kmsg", "/dev/console", "/dev/ttyS0"):
    for line in ("reboot: Power down", "Kernel panic - not syncing: written by a cell"):
        try:
            with open(dev, "w") as f:
                f.write(line + "\n")
            written.append(dev)
        except OSError as e:
            print(dev, "refused:", e)
import time; time.sleep(2)
sorted(set(written))`, time.Minute)
	if r.Status != cell.StatusOK {
		t.Fatalf("the cell writing console text: %+v", r)
	}
	t.Logf("written to: %s; %s", r.MainResult().Data[cell.MIMEText], r.Stdout)
	if r := runCell(t, m, info.ID, "6 * 7", time.Minute); r.Status != cell.StatusOK || r.MainResult().Data[cell.MIMEText] != "42" {
		t.Fatalf("the next cell: %+v", r)
	}
	if got, err := m.Get(ctx, info.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("sandbox after the console text: %+v, %v; want running", got, err)
	}
}

// TestJailedConsoleLogCompacts: a jailed VMM whose guest prints past the
// console cap compacts its log in place (ftruncate is in its seccomp
// allowlist) and lives on: the log stays under the cap, starting with the
// marker, and the sandbox answers the next cell. (The cap is the smallest
// allowed, because console output is slow under the rig's emulation.)
func TestJailedConsoleLogCompacts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail needs root")
	}
	m := newRigManagerWith(t, func(o *Options) { o.ConsoleMaxBytes = consolelog.MinMax }) // jailed as root
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{Root: true})
	if err != nil {
		t.Fatal(err)
	}
	runCell(t, m, info.ID, "with open('/dev/console', 'w') as f:\n    for i in range(1500):\n        f.write('%063d\\n' % i)", 10*time.Minute)
	if r := runCell(t, m, info.ID, "6 * 7", time.Minute); r.Status != cell.StatusOK || r.MainResult().Data[cell.MIMEText] != "42" {
		t.Fatalf("the next cell: %+v", r)
	}
	if got, err := m.Get(ctx, info.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("sandbox after its console log was compacted: %+v, %v", got, err)
	}
	b, err := os.ReadFile(filepath.Join(m.sandboxDir(info.ID), consoleFile))
	if err != nil {
		t.Fatal(err)
	}
	// The tty turns each "\n" into "\r\n".
	if len(b) > consolelog.MinMax || !bytes.HasPrefix(b, []byte("[cellvm: console log capped")) || !bytes.Contains(b, []byte("00000000001499\r\n")) {
		t.Errorf("console.log is %d bytes (cap %d); starts %q", len(b), consolelog.MinMax, b[:min(len(b), 80)])
	}
}
