package interp

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/cell"
)

// catchSIGINT makes the test binary handle SIGINT, so that the shells
// it starts do not inherit it ignored: a shell cannot trap a signal that
// was ignored when it started (bash's rule for non-interactive shells),
// and a test run in the background (as "go test ... &" starts it) has it
// ignored. The guest's agent, started by init, does not.
var catchSIGINT = sync.OnceFunc(func() { signal.Notify(make(chan os.Signal, 1), os.Interrupt) })

// newBashInterp is a Bash session on the host's bash.
func newBashInterp(t *testing.T, mod func(*Config)) *Interp {
	t.Helper()
	catchSIGINT()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash on PATH")
	}
	return newTestInterp(t, func(c *Config) {
		c.Runtime = "bash"
		c.Python = ""
		if mod != nil {
			mod(c)
		}
	})
}

// wantStdout runs code, which must end ok and print want.
func wantStdout(t *testing.T, in *Interp, code, want string) {
	t.Helper()
	res := run(t, in, code)
	expectOK(t, res)
	if res.Stdout != want {
		t.Fatalf("%q: stdout %q, want %q", code, res.Stdout, want)
	}
}

func expectStatus(t *testing.T, res cell.Result, want cell.Status) {
	t.Helper()
	if res.Status != want {
		t.Fatalf("status %q, want %q; error %+v; stdout %q; stderr %q", res.Status, want, res.Error, res.Stdout, res.Stderr)
	}
}

func TestBashStatePersists(t *testing.T) {
	in := newBashInterp(t, nil)
	res := run(t, in, "cd /tmp && export V=7\nW=8\nf() { echo \"f$1\"; }")
	expectOK(t, res)
	wantStdout(t, in, "echo $V; pwd; echo $W; f 9; declare -A m=([a]=1)", "7\n/tmp\n8\nf9\n")
	// declare at the top of a cell is global: the next cell sees it.
	res = run(t, in, "echo ${m[a]}; bash -c 'echo $V'")
	expectOK(t, res)
	if res.Stdout != "1\n7\n" || res.MainResult() != nil || !res.StateKept || res.ExecutionCount != 3 {
		t.Fatalf("result %+v", res)
	}
}

func TestBashExitStatusIsError(t *testing.T) {
	in := newBashInterp(t, nil)
	res := run(t, in, "echo out; echo err >&2; false")
	expectStatus(t, res, cell.StatusError)
	if res.Error == nil || res.Error.Name != "ExitStatus" || res.Error.Value != "exit status 1" {
		t.Fatalf("error %+v", res.Error)
	}
	if res.Stdout != "out\n" || res.Stderr != "err\n" || !res.StateKept {
		t.Fatalf("result %+v", res)
	}
	// The next cell's $? is the last one's, as at a prompt.
	wantStdout(t, in, "echo $?", "1\n")
	// A failure before the end is not the cell's status (as in a script).
	expectOK(t, run(t, in, "false; true"))
	res = run(t, in, "nosuchcommand_cellvm")
	expectStatus(t, res, cell.StatusError)
	if res.Error.Value != "exit status 127" || !strings.Contains(res.Stderr, "nosuchcommand_cellvm: command not found") {
		t.Fatalf("result %+v", res)
	}
	// A syntax error is the cell's error too, and the shell stays.
	res = run(t, in, "x=1\nif then fi")
	expectStatus(t, res, cell.StatusError)
	if !strings.Contains(res.Stderr, "syntax error") || !res.StateKept {
		t.Fatalf("result %+v", res)
	}
}

// exit, set -e, break and return end the cell, not the shell.
func TestBashExitKeepsTheShell(t *testing.T) {
	in := newBashInterp(t, nil)
	expectOK(t, run(t, in, "KEEP=1; g() { exit 4; echo no; }"))
	for _, tc := range []struct {
		code, value string
		status      cell.Status
	}{
		{"echo a; exit 3; echo no", "exit 3", cell.StatusError},
		{"echo a; exit; echo no", "", cell.StatusOK},
		{"echo a; exit 0; echo no", "", cell.StatusOK},
		{"echo a; g; echo no", "exit 4", cell.StatusError},
		{"echo a; for i in 1 2; do while :; do exit 5; done; done; echo no", "exit 5", cell.StatusError},
		{"echo a; exit -1; echo no", "exit 255", cell.StatusError},
		{"echo a; exit x; echo no", "exit 2", cell.StatusError},
		{"set -e; echo a; false; echo no", "exit status 1 (set -e)", cell.StatusError},
		{"set -e; h() { echo a; false; echo no; }; h; echo no", "exit status 1 (set -e)", cell.StatusError},
		{"echo a; return 6; echo no", "exit status 6", cell.StatusError},
		{"echo a; break; echo no", "", cell.StatusOK},
		{"echo a; break 5; echo no", "", cell.StatusOK},
		{"echo a; continue 2; echo no", "", cell.StatusOK},
	} {
		res := run(t, in, tc.code)
		if res.Status != tc.status || !res.StateKept || res.Stdout != "a\n" {
			t.Fatalf("%q: %+v", tc.code, res)
		}
		if tc.value != "" && (res.Error == nil || res.Error.Value != tc.value) {
			t.Fatalf("%q: error %+v, want %q", tc.code, res.Error, tc.value)
		}
		res = run(t, in, "echo $KEEP")
		expectOK(t, res)
		if res.Stdout != "1\n" {
			t.Fatalf("after %q: %+v", tc.code, res)
		}
	}
	// set -e stays on for the next cells, as the cell asked.
	res := run(t, in, "echo $-")
	if !strings.Contains(res.Stdout, "e") {
		t.Fatalf("set -e was not kept: %q", res.Stdout)
	}
	expectOK(t, run(t, in, "set +e"))
	// In a subshell, exit and return are bash's own.
	// return in a subshell ends the subshell (bash would run the rest of
	// the driver in it).
	res = run(t, in, "(exit 3); echo $?; (return 4 2>/dev/null; exit 5); echo $?; x=$(exit 6); echo $?")
	expectOK(t, res)
	if res.Stdout != "3\n4\n6\n" {
		t.Fatalf("subshells: %q", res.Stdout)
	}
	// builtin exit ends the shell: said so, state lost.
	res = run(t, in, "builtin exit 9")
	expectStatus(t, res, cell.StatusLost)
	if res.StateKept || !strings.Contains(res.Stderr, "the cell ended the shell (status 9)") {
		t.Fatalf("result %+v", res)
	}
	wantStdout(t, in, "echo ${KEEP:-gone}", "gone\n")
}

func TestBashTimeoutInterrupts(t *testing.T) {
	in := newBashInterp(t, nil)
	expectOK(t, run(t, in, "X=41; spin() { while :; do :; done; echo no; }; outer() { spin; echo no; sleep 100; }"))
	for _, code := range []string{
		"while :; do :; done; echo no",
		"sleep 100; echo no",
		"spin; echo no",
		"outer; echo no",
		"outer | cat; echo no",
		"f() { sleep 100; echo no; }; f; echo no",
		"for i in 1; do spin; done; echo no",
		"(while :; do :; done); echo no",
		"x=$(sleep 100); echo no",
		"sleep 100 | cat; echo no",
		"while ((1)); do ((X=X)); done; echo no",
	} {
		start := time.Now()
		res := runT(t, in, code, time.Second)
		expectStatus(t, res, cell.StatusTimeout)
		if !res.StateKept || res.KilledBy != cell.KilledByTimeout || strings.Contains(res.Stdout, "no") {
			t.Fatalf("%q: %+v", code, res)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%q took %v", code, d)
		}
		res = run(t, in, "echo $X")
		expectOK(t, res)
		if res.Stdout != "41\n" {
			t.Fatalf("after %q: %+v", code, res)
		}
	}
}

func TestBashInterrupt(t *testing.T) {
	in := newBashInterp(t, nil)
	expectOK(t, run(t, in, "X=1"))
	go func() {
		time.Sleep(300 * time.Millisecond)
		in.Interrupt()
	}()
	res := run(t, in, "sleep 100; echo no")
	expectStatus(t, res, cell.StatusError)
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept {
		t.Fatalf("result %+v", res)
	}
	wantStdout(t, in, "echo $X", "1\n")
}

// A cell that traps SIGINT itself is killed after the grace period: the
// result says the state is lost, and the next cell runs in a new shell.
func TestBashTrappingCellIsKilled(t *testing.T) {
	in := newBashInterp(t, nil)
	expectOK(t, run(t, in, "X=1"))
	res := runT(t, in, "trap 'echo caught' INT; while :; do :; done", time.Second)
	expectStatus(t, res, cell.StatusTimeout)
	if res.StateKept {
		t.Fatalf("result %+v", res)
	}
	wantStdout(t, in, "echo ${X:-gone}", "gone\n")
}

func TestBashCodeIsBytes(t *testing.T) {
	in := newBashInterp(t, func(c *Config) {
		c.Env = []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8"}
	})
	// Multi-byte text, a NUL (removed), backslashes and a code without a
	// final newline, then a cell right after it: nothing is mixed up.
	wantStdout(t, in, "s='héllo\\n'\x00; printf '%s|%d\\n' \"$s\" ${#s}", "héllo\\n|7\n")
	big := "y=" + strings.Repeat("é", 300000) + "\necho ${#y}"
	wantStdout(t, in, big, "300000\n")
	expectOK(t, run(t, in, ""))
	wantStdout(t, in, "echo ok", "ok\n")
}

func TestBashReseedAndReap(t *testing.T) {
	in := newBashInterp(t, nil)
	expectOK(t, run(t, in, "RANDOM=1; a=$RANDOM"))
	if _, err := in.Reseed(); err != nil {
		t.Fatal(err)
	}
	if err := in.reapInDriver(in.p); err != nil {
		t.Fatal(err)
	}
	// Seeded again with 1, RANDOM repeats; reseeded it does not (the
	// chance that it does is 1 in 32768 a draw).
	res := run(t, in, "b=$RANDOM$RANDOM; RANDOM=1; c=$RANDOM; echo $((a == c)) $b")
	expectOK(t, res)
	f := strings.Fields(res.Stdout)
	if len(f) != 2 || f[0] != "1" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

func TestBashNotFound(t *testing.T) {
	in := newBashInterp(t, func(c *Config) { c.Env = []string{"PATH=" + t.TempDir()} })
	res, err := in.Run(context.Background(), "echo hi", time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	expectStatus(t, res, cell.StatusError)
	if res.Error.Name != ErrNameNotFound || !strings.Contains(res.Error.Value, "no bash") {
		t.Fatalf("error %+v", res.Error)
	}
}

func TestBashEncode(t *testing.T) {
	b, err := encodeBash(command{Op: "exec", N: 3, Code: "a\x00b\n"})
	if err != nil || string(b) != "exec 3 3\nab\n" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := encodeBash(command{Op: "other"}); err == nil {
		t.Fatal("an unknown command was encoded")
	}
}

// Functions that shadow the builtins the driver uses do not break it
// (only "builtin" itself would).
func TestBashShadowedBuiltins(t *testing.T) {
	in := newBashInterp(t, nil)
	res := run(t, in, "X=1; printf() { echo P; }; read() { echo R; }; trap() { echo T; }; set() { echo S; }\n"+
		"local() { echo L; }; source() { echo SRC; }; return() { echo RET; }; :() { echo C; }")
	expectOK(t, res)
	res = run(t, in, "echo $X; false")
	expectStatus(t, res, cell.StatusError)
	if res.Stdout != "1\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
	res = runT(t, in, "while true; do X=2; done", time.Second)
	expectStatus(t, res, cell.StatusTimeout)
	if !res.StateKept {
		t.Fatalf("result %+v", res)
	}
}

// A cell's commands get neither the command pipe nor the event pipe (in
// any fd), and read /dev/null.
func TestBashCellFDs(t *testing.T) {
	in := newBashInterp(t, nil)
	res := run(t, in, "cat; ls -l /proc/self/fd/")
	expectOK(t, res)
	pipes := map[string]bool{}
	for _, fd := range []int{int(in.p.ctl.Fd()), in.p.evFD} {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			t.Fatal(err)
		}
		pipes["pipe:["+strconv.FormatUint(st.Ino, 10)+"]"] = true
	}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[len(f)-2] != "->" {
			continue
		}
		fd, target := f[len(f)-3], f[len(f)-1]
		if pipes[target] || fd == "4" {
			t.Errorf("a cell's command has fd %s: %s (all: %q)", fd, target, res.Stdout)
		}
	}
}

// A fork bomb under a pids limit gives a result, and the next cell
// answers.
func TestBashForkBomb(t *testing.T) {
	parent := testCgroupParent(t)
	in := newBashInterp(t, func(c *Config) {
		c.CgroupParent = parent
		c.PidsMax = 64
	})
	expectOK(t, run(t, in, "X=1"))
	res := runT(t, in, ":(){ :|:& };:; sleep 2", 2*time.Second)
	if res.Status == cell.StatusOK {
		t.Fatalf("result %+v", res)
	}
	res = run(t, in, "unset -f :; echo ${X:-gone}")
	expectOK(t, res)
	if res.Stdout != "1\n" && res.Stdout != "gone\n" {
		t.Fatalf("stdout %q", res.Stdout)
	}
}

// set -x traces its own cell, not the driver's lines, and ends with it.
func TestBashTraceEndsWithItsCell(t *testing.T) {
	in := newBashInterp(t, nil)
	res := run(t, in, "set -x; echo c")
	expectOK(t, res)
	if res.Stderr != "+ echo c\n+ __cellvm_st=0\n+ builtin set +xv\n" && res.Stderr != "++ echo c\n+ __cellvm_st=0\n+ builtin set +xv\n" {
		t.Fatalf("stderr %q", res.Stderr)
	}
	res = run(t, in, "echo d")
	if res.Stderr != "" || res.Stdout != "d\n" {
		t.Fatalf("after set -x: %+v", res)
	}
}

// A cell's TMOUT (read's default timeout) does not time out the driver's
// wait for the next command, and its options do not break the driver.
func TestBashTMOUT(t *testing.T) {
	in := newBashInterp(t, nil)
	expectOK(t, run(t, in, "X=1; TMOUT=1; set -uo pipefail; shopt -s nullglob extglob failglob; set -f -C"))
	time.Sleep(1500 * time.Millisecond)
	wantStdout(t, in, "echo $X", "1\n")
	res := runT(t, in, "while :; do :; done", time.Second)
	expectStatus(t, res, cell.StatusTimeout)
	if !res.StateKept {
		t.Fatalf("result %+v", res)
	}
	wantStdout(t, in, "echo $X", "1\n")
}
