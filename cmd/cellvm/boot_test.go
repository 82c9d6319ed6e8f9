package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/kvm"
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
		{[]string{"boot", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"boot", "extra"}, 2, "unexpected argument"},
		{[]string{"nonsense"}, 2, "unknown command"},
		{[]string{"run", "--memory", "10", "-c", "1"}, 2, "memory"},
		{[]string{"run", "--vcpus", "99", "-c", "1"}, 2, "vcpus"},
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

func TestBootWithoutKVMSaysSo(t *testing.T) {
	if kvm.Available() {
		t.Skip("this host has /dev/kvm")
	}
	k := filepath.Join(t.TempDir(), "k")
	os.WriteFile(k, []byte("x"), 0o644)
	var out, errb strings.Builder
	code := run([]string{"boot", "--kernel", k}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "/dev/kvm is not available") {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}
