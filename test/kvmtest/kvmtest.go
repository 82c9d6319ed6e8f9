// Package kvmtest holds what tests that need /dev/kvm share: the decision to
// skip (outside the nested rig) or fail (inside it, where /dev/kvm must be
// there), and the paths of the project's build outputs.
package kvmtest

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/kvm"
)

// InRig reports whether the tests run inside the nested-KVM rig.
func InRig() bool { return os.Getenv("CELLVM_RIG") == "1" }

var hostKVM = sync.OnceValue(func() kvm.Verdict { return kvm.Check(kvm.CheckConfig{}) })

// HostKVM is this host's KVM verdict (kvm.Check, run once per test binary:
// a probe guest, not a look at the device node).
func HostKVM() kvm.Verdict { return hostKVM() }

// Require skips t unless this host's KVM can run cellvm's guests (decided by
// the probe, so a kvm_pvm /dev/kvm skips too), except in the rig, where a
// KVM that cannot is a failure.
func Require(t testing.TB) {
	t.Helper()
	v := HostKVM()
	if v.Usable {
		return
	}
	if InRig() {
		t.Fatalf("CELLVM_RIG=1 but the rig's KVM cannot run cellvm guests: %s", v.Reason)
	}
	t.Skipf("needs a KVM that runs cellvm guests (runs in the nested rig: make test): %s", v.Reason)
}

// RepoRoot returns the checkout's root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		up := filepath.Dir(d)
		if up == d {
			t.Fatal("no go.mod above the test's directory")
		}
		d = up
	}
}

// BuildFile returns the path of a build output (e.g. "kernel/vmlinux")
// under $CELLVM_BUILD or the checkout's build/, failing t if it is missing.
func BuildFile(t testing.TB, rel string) string {
	t.Helper()
	dir := os.Getenv("CELLVM_BUILD")
	if dir == "" {
		dir = filepath.Join(RepoRoot(t), "build")
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run 'make setup' first (%v)", p, err)
	}
	return p
}
