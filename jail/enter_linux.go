package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Enter builds the jail's file system view and moves the calling process
// into it: its mounts made private, each bind mounted (read-only, nosuid,
// noexec, nodev unless asked otherwise), pivot_root into s.Root, the old
// root detached, the new root read-only, and the hostname set. It must run
// as root inside a new mount namespace (Cloneflags), before any file of the
// VM is opened; afterwards paths are the jail's. It checks the namespace
// first (ownMountNamespace) and refuses, having mounted nothing, in its
// launcher's.
func Enter(s Spec) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := ownMountNamespace(); err != nil {
		return err
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("jail: make mounts private (is this a new mount namespace?): %w", err)
	}
	if err := unix.Mount(s.Root, s.Root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("jail: bind %s onto itself: %w", s.Root, err)
	}
	for _, b := range s.Binds {
		target := filepath.Join(s.Root, b.Target)
		if err := unix.Mount(b.Source, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("jail: bind %s at %s: %w", b.Source, b.Target, err)
		}
		flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NOSUID | unix.MS_NOEXEC)
		if !b.Writable {
			flags |= unix.MS_RDONLY
		}
		if !b.Device {
			flags |= unix.MS_NODEV
		}
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("jail: restrict %s: %w", b.Target, err)
		}
	}
	if err := unix.Chdir(s.Root); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("jail: pivot_root into %s: %w", s.Root, err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("jail: detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("jail: make the root read-only: %w", err)
	}
	if s.Hostname != "" {
		if err := unix.Sethostname([]byte(s.Hostname)); err != nil {
			return fmt.Errorf("jail: hostname: %w", err)
		}
	}
	return nil
}

// ownMountNamespace refuses to go on in its launcher's mount namespace.
// Making "/" private succeeds there too, so without this a launcher that
// forgot CLONE_NEWNS would have Enter bind mount and pivot_root the
// daemon's (the host's) own namespace: the wall would rest on every
// launcher being right. The launcher is the parent as /proc sees it (the
// VMM's own pid namespace has no /proc of its own yet, and reading the
// parent's link needs no privilege over the host's pid 1).
func ownMountNamespace() error {
	return checkOwnMountNamespace(os.Readlink, func() ([]byte, error) { return os.ReadFile("/proc/self/status") })
}

// checkOwnMountNamespace is ownMountNamespace with its reads given. The
// parent's pid is read again after its namespace link: a launcher that
// died between the two reads could have had its pid reused by a process
// in another mount namespace, and its link would then say nothing about
// the launcher's. Had it died, this process would have been reparented
// and its PPid changed, so the same PPid after the link says the link was
// the launcher's.
func checkOwnMountNamespace(readlink func(string) (string, error), readStatus func() ([]byte, error)) error {
	self, err := readlink("/proc/self/ns/mnt")
	if err != nil {
		return fmt.Errorf("jail: read this process's mount namespace: %w", err)
	}
	ppid, err := readParentPID(readStatus)
	if err != nil {
		return err
	}
	if ppid == 0 {
		return errors.New("jail: this process's parent is outside the pid namespace of /proc, so whether its mount namespace is its own cannot be told; start it from the daemon with jail.Cloneflags")
	}
	parent, err := readlink(fmt.Sprintf("/proc/%d/ns/mnt", ppid))
	if err != nil {
		return fmt.Errorf("jail: read the launcher's (pid %d) mount namespace, to check that this process has one of its own: %w", ppid, err)
	}
	again, err := readParentPID(readStatus)
	if err != nil {
		return err
	}
	if again != ppid {
		return fmt.Errorf("jail: this process's launcher (pid %d) exited while its mount namespace was checked (the parent is now pid %d); start the VMM again", ppid, again)
	}
	if self == parent {
		return fmt.Errorf("jail: this process shares its launcher's (pid %d) mount namespace %s; start it with jail.Cloneflags (CLONE_NEWNS) so that the jail's mounts are its own", ppid, self)
	}
	return nil
}

// readParentPID is the PPid of the status readStatus reads.
func readParentPID(readStatus func() ([]byte, error)) (int, error) {
	status, err := readStatus()
	if err != nil {
		return 0, fmt.Errorf("jail: read this process's status: %w", err)
	}
	ppid, err := parentPID(status)
	if err != nil {
		return 0, fmt.Errorf("jail: this process's parent: %w", err)
	}
	return ppid, nil
}

// parentPID is the PPid field of a /proc/PID/status.
func parentPID(status []byte) (int, error) {
	for line := range strings.Lines(string(status)) {
		v, ok := strings.CutPrefix(line, "PPid:")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("status: PPid %q", strings.TrimSpace(v))
		}
		return n, nil
	}
	return 0, errors.New("status: no PPid line")
}

// lastCap is the highest capability number the bounding set is cleared of;
// PR_CAPBSET_DROP answers EINVAL past the kernel's own last one.
const lastCap = 63

// errCgo is Drop's refusal in a binary built with cgo.
var errCgo = errors.New("jail: this binary was built with cgo, so its privileges cannot be dropped on every thread; build cellvm with CGO_ENABLED=0 (make cellvm does)")

// boundingSetEmpty is set once DropBoundingSet has emptied the bounding
// set of every thread: a thread made after that inherits its creator's
// empty set, so it stays empty on every thread for the process's life.
var boundingSetEmpty atomic.Bool

// DropBoundingSet empties the capability bounding set of every thread
// (PR_CAPBSET_DROP, one all-threads call a capability: some 41 of them,
// each stopping the world). It takes no capability from the effective or
// permitted sets, so Enter's mounts still work after it; what it takes is
// what an execve could ever grant. A pooled VMM process calls it while it
// waits for its claim, so that Drop, on a start's path, need not; Drop
// calls it too, and a second call does nothing.
func DropBoundingSet() error {
	if boundingSetEmpty.Load() {
		return nil
	}
	for c := uintptr(0); c <= lastCap; c++ {
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, c, 0); e == syscall.EINVAL {
			break
		} else if e == syscall.ENOTSUP {
			// AllThreadsSyscall's answer in a cgo binary (AllThreads).
			return errCgo
		} else if e != 0 {
			return fmt.Errorf("jail: drop capability %d from the bounding set: %w", c, e)
		}
	}
	boundingSetEmpty.Store(true)
	return nil
}

// Drop gives up the process's privileges for good, on every thread: the
// rlimits, an empty capability bounding set, no supplementary groups, the
// jail's gid and uid (real, effective and saved, which clears the
// permitted, effective and ambient capabilities), and no_new_privs. Run it
// after the machine is built (its files and /dev/kvm are open) and before
// the guest runs. The binary must be built without cgo: the all-threads
// system calls need Go's own runtime.
func Drop(s Spec) error {
	if !AllThreads() {
		return errCgo
	}
	for _, l := range []struct {
		res int
		max uint64
	}{{unix.RLIMIT_NOFILE, s.Limits.NoFile}, {unix.RLIMIT_NPROC, s.Limits.NProc}, {unix.RLIMIT_FSIZE, s.Limits.FSize}, {unix.RLIMIT_CORE, 0}} {
		if err := unix.Setrlimit(l.res, &unix.Rlimit{Cur: l.max, Max: l.max}); err != nil {
			return fmt.Errorf("jail: rlimit %d: %w", l.res, err)
		}
	}
	if err := DropBoundingSet(); err != nil {
		return err
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("jail: setgroups: %w", err)
	}
	if err := syscall.Setresgid(s.GID, s.GID, s.GID); err != nil {
		return fmt.Errorf("jail: setresgid %d: %w", s.GID, err)
	}
	if err := syscall.Setresuid(s.UID, s.UID, s.UID); err != nil {
		return fmt.Errorf("jail: setresuid %d: %w", s.UID, err)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return fmt.Errorf("jail: no_new_privs: %w", e)
	}
	// Check rather than trust: a thread that kept a capability would be a
	// hole no test of the others shows.
	var hdr = unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("jail: capget: %w", err)
	}
	if data[0].Effective|data[1].Effective|data[0].Permitted|data[1].Permitted != 0 {
		return fmt.Errorf("jail: capabilities left after dropping them (effective %#x %#x)", data[0].Effective, data[1].Effective)
	}
	return nil
}

// AllThreads reports whether this binary can make a system call on every
// thread at once (syscall.AllThreadsSyscall), which Drop needs: false when
// it was built with cgo.
func AllThreads() bool {
	_, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0)
	return e != syscall.ENOTSUP
}
