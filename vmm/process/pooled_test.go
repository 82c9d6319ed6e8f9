package process

import (
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/jail"
	"github.com/cellvm/cellvm/vmm/control"
	"golang.org/x/sys/unix"
)

// pooledRole makes the test binary run Main as `vmm --pooled`.
const pooledRole = "CELLVM_TEST_VMM_POOLED"

func init() {
	if os.Getenv(pooledRole) == "1" {
		if err := Main(control.PooledArgs()[1:], io.Discard, os.Stderr); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// TestPooledProcessEmptiesItsBoundingSetWhileItWaits: a pooled VMM
// process empties its capability bounding set before its claim comes
// (jail.DropBoundingSet), so that the claimed start's jail.Drop need not
// stop the world once a capability; and a launcher that closes its socket
// unclaimed still ends it quietly.
func TestPooledProcessEmptiesItsBoundingSetWhileItWaits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: PR_CAPBSET_DROP")
	}
	if !jail.AllThreads() {
		t.Skip("this test binary was built with cgo; the jail needs a binary without it, as make test builds")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "pool"), os.NewFile(uintptr(fds[1]), "pool (child)")
	defer ours.Close()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), pooledRole+"=1")
	cmd.ExtraFiles = []*os.File{theirs} // control.PoolFD
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	defer cmd.Process.Kill()
	status := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status"
	var bnd string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if bnd = statusLine(status, "CapBnd"); bnd == "0000000000000000" {
			break
		}
	}
	if bnd != "0000000000000000" {
		t.Errorf("the waiting pooled process's bounding set is %q, want empty", bnd)
	}
	if eff := statusLine(status, "CapEff"); eff == "0000000000000000" || eff == "" {
		t.Errorf("the waiting pooled process has effective capabilities %q; the jail's Enter needs them", eff)
	}
	ours.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the unclaimed pooled process exited with %v, want 0; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pooled process outlived its launcher's socket")
	}
}

// statusLine is the value of key in a /proc status file ("" if absent).
func statusLine(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
