package pid1

import (
	"log/slog"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/guestinit/reaper"
	"github.com/cellvm/cellvm/guestinit/rootfs"
)

// Shutdown stops every process (SIGTERM, then SIGKILL after a grace
// period), syncs, unmounts in reverse order and reboots, which ends the
// VM. It never returns.
func Shutdown(log *slog.Logger, r *reaper.Reaper) {
	_ = unix.Kill(-1, unix.SIGTERM)
	if !waitNoChildren(r, 2*time.Second) {
		_ = unix.Kill(-1, unix.SIGKILL)
		waitNoChildren(r, 2*time.Second)
	}
	unix.Sync()
	rootfs.UnmountAll(log)
	unix.Sync()
	log.Info("cellvm-init: rebooting")
	fatalReboot()
}

// waitNoChildren reaps until no child is left or timeout passes. Every
// user process is a child of PID 1 by then: orphans are re-parented to it.
func waitNoChildren(r *reaper.Reaper, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		r.Reap()
		if !r.HasChildren() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fatalReboot() {
	for {
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		time.Sleep(time.Second)
	}
}
