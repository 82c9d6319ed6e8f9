// Package drop starts a program with the cells' credentials: it is the
// step between the guest agent (root, shielded from the OOM killer) and
// the interpreter or a command.
//
// The agent re-executes its own binary with Arg; that process, still root,
//
//   - sets its oom_score_adj to 0. PID 1 and the agent run at -1000, which
//     children inherit together with the floor below which an
//     unprivileged process may not go; writing 0 as root raises both, so
//     cell code can neither stay out of the OOM killer's reach nor climb
//     back to -1000;
//   - drops to the cells' uid and gid (unless cells run as root), with no
//     supplementary groups and so no capabilities;
//   - sets no_new_privs, so no setuid binary gives privileges back, and
//     the parent-death signal again (a change of credentials clears it);
//   - and execs the program, looked up in PATH as the new user.
//
// Doing this in a process of its own, before the program's first
// instruction, leaves no window in which cell code runs with the agent's
// standing; Go's os/exec has no hook between fork and exec for it.
package drop

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Arg is the argument that makes the binary run as the drop step.
const Arg = "drop"

// Spec is whom the program runs as.
type Spec struct {
	// UID and GID are the credentials; with Root they are ignored and the
	// program keeps root's.
	UID, GID int
	Root     bool
}

// Command returns the command line that runs argv through the drop step
// of the binary self (in the guest, /proc/self/exe of the agent).
func (s Spec) Command(self string, argv []string) []string {
	out := []string{self, Arg, "-uid", strconv.Itoa(s.UID), "-gid", strconv.Itoa(s.GID)}
	if s.Root {
		out = append(out, "-root")
	}
	return append(append(out, "--"), argv...)
}

// ExitNotFound is the drop step's exit code when the program cannot be
// started, as a shell's is; the reason is on stderr.
const ExitNotFound = 127

// Main is the drop step (args are those after Arg). It returns only on
// failure, with the exit code.
func Main(args []string) int {
	fs := flag.NewFlagSet(Arg, flag.ContinueOnError)
	var s Spec
	fs.IntVar(&s.UID, "uid", -1, "user id")
	fs.IntVar(&s.GID, "gid", -1, "group id")
	fs.BoolVar(&s.Root, "root", false, "keep root's credentials")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "cellvm drop: no program")
		return 2
	}
	// no_new_privs and the parent-death signal are a thread's, not the
	// process's, and exec keeps only the calling thread's: become and
	// the exec must run on one OS thread, or the program may start
	// without no_new_privs (seen: 1 run in about 50 under load).
	runtime.LockOSThread()
	if err := become(s); err != nil {
		fmt.Fprintf(os.Stderr, "cellvm: could not start %s with the cells' credentials: %v\n", argv[0], err)
		return 126
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "exec %s: %v\n", argv[0], errors.Unwrap(err))
		return ExitNotFound
	}
	err = unix.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "exec %s: %v\n", argv[0], err)
	return ExitNotFound
}

// become sets this process up as described in the package comment.
func become(s Spec) error {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("0"), 0); err != nil {
		return fmt.Errorf("reset oom_score_adj: %w", err)
	}
	if !s.Root {
		if s.UID <= 0 || s.GID <= 0 {
			return fmt.Errorf("uid %d, gid %d: not an unprivileged user", s.UID, s.GID)
		}
		// The syscall package applies these to every thread of the process.
		if err := syscall.Setgroups(nil); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setresgid(s.GID, s.GID, s.GID); err != nil {
			return fmt.Errorf("setresgid: %w", err)
		}
		if err := syscall.Setresuid(s.UID, s.UID, s.UID); err != nil {
			return fmt.Errorf("setresuid: %w", err)
		}
		if unix.Geteuid() != s.UID || unix.Getegid() != s.GID {
			return errors.New("credentials did not change")
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	return nil
}
