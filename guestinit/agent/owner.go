package agent

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Owner is the user whose permissions uploads and downloads are done
// with, so the host can read and write in the guest only what the cells
// can: a symlink a cell planted in /workspace cannot lead a root agent to
// /etc, and uploaded files belong to the cells' user.
type Owner struct {
	UID, GID int
}

// asOwner runs f on an OS thread of its own whose file-system uid and gid
// are o's, with o's group as its only group. Those are per-thread
// credentials (setfsuid, setfsgid and setgroups made as raw system calls
// reach one thread), and moving the fs uid off 0 drops the thread's
// file-system capabilities (CAP_DAC_OVERRIDE and the rest). The thread is
// never handed back: it ends with f's goroutine, its credentials with it.
// With o nil, f runs as the agent.
func (o *Owner) asOwner(f func() error) error {
	if o == nil {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no UnlockOSThread: the thread exits with the goroutine
		gids := []uint32{uint32(o.GID)}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&gids[0])), 0); e != 0 {
			errc <- fmt.Errorf("take the cells' groups: %w", e)
			return
		}
		unix.RawSyscall(unix.SYS_SETFSGID, uintptr(o.GID), 0, 0)
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(o.UID), 0, 0)
		// setfs[ug]id report no errors; they return the previous id, so
		// asking again with an invalid id (-1) reads the current one.
		uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
		gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
		if int(uid) != o.UID || int(gid) != o.GID {
			errc <- fmt.Errorf("take the cells' file-system ids: have %d:%d, want %d:%d", uid, gid, o.UID, o.GID)
			return
		}
		errc <- f()
	}()
	return <-errc
}
