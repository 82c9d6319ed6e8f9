// Package netnstest runs a test in a network namespace of its own, so that
// the TAPs, veths, addresses, routes, iptables rules and sysctls it makes
// never touch the namespace of the machine running the tests. (One test that
// ran in the host's namespace once replaced the routes of a development
// machine's real uplink and cut it off its package registries.)
//
// The test binary re-executes itself for the one test, as a child in a new
// network namespace (clone with CLONE_NEWNET): everything the test starts,
// VMM processes and `ip netns add` worlds included, inherits it, and the
// kernel frees it when the last process in it exits.
package netnstest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// envChild marks the child: its value is the test that runs in it.
const envChild = "CELLVM_TEST_OWN_NETNS"

// Isolate makes t run in a network namespace of its own. In the parent
// process it runs t's test again in a child in a new namespace, reports the
// child's output and verdict as t's, and returns false: the caller returns
// at once. In that child it brings lo up and returns true: the caller goes
// on with the test's body. It needs root (CAP_SYS_ADMIN); without it t is
// skipped.
func Isolate(t *testing.T) bool {
	t.Helper()
	if os.Getenv(envChild) == t.Name() {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("bring lo up in the test's namespace: %v: %s", err, out)
		}
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace of its own")
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatalf("netnstest.Isolate works on top-level tests, not %s", t.Name())
	}
	args := []string{"-test.run", "^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count", "1"}
	if f := lookupFlag("test.timeout"); f != "" {
		args = append(args, "-test.timeout", f)
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envChild+"="+t.Name())
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own (pid %d):\n%s", pidOf(cmd), out)
	switch {
	case err != nil:
		t.Fatalf("%s failed in its own network namespace: %v", t.Name(), err)
	case strings.Contains(string(out), "--- SKIP: "+t.Name()):
		t.Skip("skipped in its own network namespace (see the log above)")
	case !strings.Contains(string(out), "--- PASS: "+t.Name()):
		t.Fatalf("%s in its own network namespace gave no verdict", t.Name())
	}
	return false
}

func pidOf(c *exec.Cmd) int {
	if c.Process == nil {
		return 0
	}
	return c.Process.Pid
}

// lookupFlag returns the value of a -test.* flag as the test binary was
// given it (the testing package's flags are not exported).
func lookupFlag(name string) string {
	for i, a := range os.Args {
		for _, p := range []string{"-" + name + "=", "--" + name + "="} {
			if strings.HasPrefix(a, p) {
				return strings.TrimPrefix(a, p)
			}
		}
		if (a == "-"+name || a == "--"+name) && i+1 < len(os.Args) {
			return os.Args[i+1]
		}
	}
	return ""
}

// InChild reports whether this process is a child made by Isolate.
func InChild() bool { return os.Getenv(envChild) != "" }
