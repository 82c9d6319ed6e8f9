package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/kvm"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// Errors that must come before any VM exists, on any host.
func TestBootBadArguments(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"boot", "--vcpus", "0", "--kernel", "x"}, 2, "--vcpus must be at least 1"},
		{[]string{"boot", "--memory", "0", "--kernel", "x"}, 2, "--memory must be positive"},
		{[]string{"boot", "--bogus"}, 2, "unknown flag: --bogus"}, // pflag's wording (was Go flag's "flag provided but not defined")
		{[]string{"boot", "extra"}, 2, "unexpected argument"},
		{[]string{"nonsense"}, 2, "unknown command"},
		{[]string{"run", "--memory", "10", "-c", "1"}, 2, "memory"},
		{[]string{"run", "--vcpus", "99", "-c", "1"}, 2, "vcpus"},
		// 0 is the API's "default"; typed on the command line it is refused.
		{[]string{"run", "--memory", "0", "-c", "1"}, 2, "--memory must be at least 1 MiB"},
		{[]string{"run", "--vcpus", "0", "-c", "1"}, 2, "--vcpus must be at least 1"},
		{[]string{"sandbox", "create", "--memory", "-5"}, 2, "--memory must be at least 1 MiB"},
		{[]string{"run", "--timeout", "-1s", "-c", "1"}, 2, "--timeout must be positive"},
		{[]string{"run"}, 2, "no code"},
		{[]string{"boot", "--kernel", "x", "--log-level", "loud"}, 2, "bad --log-level"},
		{[]string{"boot", "--kernel", "x", "--disk", ",ro"}, 2, "--disk wants PATH[,ro]"},
		{[]string{"boot", "--kernel", "x", "--disk", "a,rx"}, 2, "unknown option"},
		{[]string{"boot", "--kernel", "x", "--vsock", "2,/tmp/v"}, 2, "must be a number >= 3"},
		{[]string{"boot", "--kernel", "x", "--vsock", "7"}, 2, "--vsock wants CID,UDS"},
	} {
		var out, errb strings.Builder
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != c.code || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and %q", c.args, code, errb.String(), c.code, c.msg)
		}
	}
}

// TestUnusableKVMRefusedAtOnce: on a host whose KVM cannot run cellvm's
// guests (none at all, or kvm_pvm as on these development machines), every
// front end that would start a VM fails at once with the check's reason and
// leaves nothing behind, and doctor names the provider.
func TestUnusableKVMRefusedAtOnce(t *testing.T) {
	v := kvmtest.HostKVM()
	if v.Usable {
		t.Skipf("this host's KVM can run cellvm guests (%s)", v.Summary())
	}
	k := filepath.Join(t.TempDir(), "k")
	os.WriteFile(k, []byte("x"), 0o644)
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "cellvm-run-*"))
	cases := [][]string{
		{"boot", "--kernel", k},
		{"run", "-c", "1"},
		{"serve", "--socket", filepath.Join(t.TempDir(), "s.sock"), "--network=false"},
	}
	// With a real kernel, boot builds the machine while the probe runs
	// (where /dev/kvm opens at all); the guest must still never start.
	if real := filepath.Join(kvmtest.RepoRoot(t), "build", "kernel", "vmlinux"); statOK(real) {
		cases = append(cases, []string{"boot", "--kernel", real})
	}
	for _, args := range cases {
		var out, errb strings.Builder
		start := time.Now()
		code := run(args, strings.NewReader(""), &out, &errb)
		took := time.Since(start)
		if code == 0 || !strings.Contains(errb.String(), v.Reason) || !strings.Contains(errb.String(), "cellvm doctor") {
			t.Errorf("%v: exit %d, stderr %q; want non-zero, the reason %q and a pointer to 'cellvm doctor'", args, code, errb.String(), v.Reason)
		}
		if out.Len() != 0 || strings.Contains(errb.String(), `msg="vm starting"`) {
			t.Errorf("%v: the guest started on an unusable KVM: console %q, log %q", args, out.String(), errb.String())
		}
		// A bound for a hang, not a timing claim: the probe's own deadline
		// is kvm.DefaultProbeTimeout.
		if took > kvm.DefaultProbeTimeout+5*time.Second {
			t.Errorf("%v took %v", args, took)
		}
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "cellvm-run-*"))
	if len(after) > len(before) {
		t.Errorf("state directories left behind: %v (before: %v)", after, before)
	}
	var out, errb strings.Builder
	if code := run([]string{"doctor", "--kvm"}, strings.NewReader(""), &out, &errb); code != 1 {
		t.Errorf("doctor --kvm: exit %d, want 1", code)
	}
	line := out.String()
	if !strings.Contains(line, "[FAIL]") || !strings.Contains(line, "provider "+string(v.Provider)) || !strings.Contains(line, v.Reason) {
		t.Errorf("doctor --kvm printed %q; want FAIL, the provider %s and the reason", line, v.Provider)
	}
}

func TestKVMDoctorLine(t *testing.T) {
	for _, c := range []struct {
		v      kvm.Verdict
		good   bool
		detail []string
		fix    string
	}{
		{kvm.Verdict{Provider: kvm.ProviderIntel, Present: true, Probed: true, Usable: true, Took: 4 * time.Millisecond},
			true, []string{"provider kvm_intel", "probe guest", "4ms"}, ""},
		{kvm.Verdict{Provider: kvm.ProviderAMD, Present: true, Probed: true, Usable: true},
			true, []string{"provider kvm_amd"}, ""},
		{kvm.Verdict{Provider: kvm.ProviderPVM, Present: true, Probed: true, Reason: "/dev/kvm is provided by kvm_pvm, which runs only guest kernels built for PVM", Fix: "run on a host with VT-x"},
			false, []string{"provider kvm_pvm", "cannot run guests here", "built for PVM"}, "VT-x"},
		{kvm.Verdict{Provider: kvm.ProviderNone, Reason: "/dev/kvm is missing", Fix: "nested rig"},
			false, []string{"provider none", "is missing"}, "nested rig"},
	} {
		good, detail, fix := kvmDoctorLine(c.v)
		if good != c.good || !strings.Contains(fix, c.fix) || (c.fix == "") != (fix == "") {
			t.Errorf("%s: good %v fix %q, want %v %q", c.v.Provider, good, fix, c.good, c.fix)
		}
		for _, w := range c.detail {
			if !strings.Contains(detail, w) {
				t.Errorf("%s: %q does not say %q", c.v.Provider, detail, w)
			}
		}
	}
}

func statOK(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
