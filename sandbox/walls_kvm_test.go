package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// TestConsoleTextDoesNotEndASandbox: a cell that writes the kernel's
// power-off and panic messages to /dev/kmsg and the console leaves its
// sandbox running, and the next cell answers. (The VM used to end on
// "reboot: Power down" and report a panic on "Kernel panic".)
func TestConsoleTextDoesNotEndASandbox(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	info, err := m.Create(ctx, Config{})
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
	if got, err := m.Get(ctx, info.ID); err != nil || got.State != StateRunning {
		t.Fatalf("sandbox after the console text: %+v, %v; want running", got, err)
	}
}
