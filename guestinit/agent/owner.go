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
// file-system capabilities (CAP_DAC_OVERRIDE and the rest); moving it back
// restores them. The thread gets the agent's credentials back before it is
// handed back. It must not simply end instead: a child's parent-death
// signal fires when the thread that forked it ends, and Go runs forks on
// any of its threads, so the interpreter would die with it. Only if the
// credentials cannot be restored does the thread end (locked, the runtime
// then discards it). With o nil, f runs as the agent.
func (o *Owner) asOwner(f func() error) error {
	if o == nil {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restore, err := o.become()
		if err == nil {
			err = f()
		}
		if restore() {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// become switches the calling (locked) thread to o's file-system
// credentials; restore puts the thread's own back and reports whether it
// could.
func (o *Owner) become() (restore func() bool, err error) {
	groups := make([]uint32, 64)
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, uintptr(len(groups)), uintptr(unsafe.Pointer(&groups[0])), 0)
	if e != 0 {
		return func() bool { return true }, fmt.Errorf("read the agent's groups: %w", e)
	}
	groups = groups[:n]
	uid, gid := fsIDs()
	restore = func() bool {
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
		unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
		var p uintptr
		if len(groups) > 0 {
			p = uintptr(unsafe.Pointer(&groups[0]))
		}
		_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), p, 0)
		u, g := fsIDs()
		return e == 0 && u == uid && g == gid
	}
	one := []uint32{uint32(o.GID)}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 1, uintptr(unsafe.Pointer(&one[0])), 0); e != 0 {
		return restore, fmt.Errorf("take the cells' groups: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(o.GID), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(o.UID), 0, 0)
	if u, g := fsIDs(); u != o.UID || g != o.GID {
		return restore, fmt.Errorf("take the cells' file-system ids: have %d:%d, want %d:%d", u, g, o.UID, o.GID)
	}
	return restore, nil
}

// fsIDs reads the thread's file-system uid and gid: setfs[ug]id report no
// errors and return the previous id, so asking with an invalid id (-1)
// changes nothing and tells the current one.
func fsIDs() (uid, gid int) {
	u, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	g, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	return int(u), int(g)
}
