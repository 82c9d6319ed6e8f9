// Package kvmtest holds what tests that need /dev/kvm share: the decision to
// skip (outside the nested rig) or fail (inside it, where /dev/kvm must be
// there), and the paths of the project's build outputs.
package kvmtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cellvm/cellvm/kvm"
)

// InRig reports whether the tests run inside the nested-KVM rig.
func InRig() bool { return os.Getenv("CELLVM_RIG") == "1" }

// Require skips t when /dev/kvm is absent, unless in the rig, where that is
// a failure.
func Require(t testing.TB) {
	t.Helper()
	if kvm.Available() {
		return
	}
	if InRig() {
		t.Fatal("CELLVM_RIG=1 but /dev/kvm is missing: the rig did not load kvm-amd")
	}
	t.Skip("needs /dev/kvm: runs in the nested rig (make test)")
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
