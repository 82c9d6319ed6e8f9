package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/test/netnstest"
)

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func has(diff []string, want string) bool {
	for _, l := range diff {
		if strings.Contains(l, want) {
			return true
		}
	}
	return false
}

// TestGuardSeesWhatATestChanges makes, in a namespace of its own, each kind
// of change a careless network test makes to a host — a link, an address, a
// route into a documentation range, an iptables rule, a named namespace,
// ip_forward — and checks the guard reports each one, then reports nothing
// once they are undone.
func TestGuardSeesWhatATestChanges(t *testing.T) {
	if !netnstest.Isolate(t) {
		return
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
	before, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(before, before); len(d) != 0 {
		t.Fatalf("a state differs from itself: %v", d)
	}
	sh(t, "ip", "link", "add", "cvg-dummy0", "type", "veth", "peer", "name", "cvg-peer0")
	sh(t, "ip", "link", "set", "cvg-peer0", "up")
	sh(t, "ip", "link", "set", "cvg-dummy0", "up")
	sh(t, "ip", "addr", "add", "192.0.2.77/24", "dev", "cvg-dummy0")
	sh(t, "ip", "route", "add", "198.51.100.0/24", "via", "192.0.2.1", "dev", "cvg-dummy0")
	sh(t, "iptables", "-A", "FORWARD", "-s", "192.0.2.77", "-j", "DROP")
	fwd, _ := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	flip := "1"
	if strings.TrimSpace(string(fwd)) == "1" {
		flip = "0"
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte(flip), 0o644); err != nil {
		t.Fatal(err)
	}
	after, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	d := Diff(before, after)
	t.Logf("diff:\n%s", strings.Join(d, "\n"))
	for _, want := range []string{
		"links: added: cvg-dummy0 up",
		"addresses: added: cvg-dummy0 inet 192.0.2.77/24",
		"routes: added: 198.51.100.0/24 via 192.0.2.1 dev cvg-dummy0",
		"iptables: added: filter: -A FORWARD -s 192.0.2.77/32 -j DROP",
		"sysctls: added: net/ipv4/ip_forward = " + flip,
		"sysctls: removed: net/ipv4/ip_forward = " + strings.TrimSpace(string(fwd)),
	} {
		if !has(d, want) {
			t.Errorf("the guard did not report %q", want)
		}
	}
	sh(t, "iptables", "-D", "FORWARD", "-s", "192.0.2.77", "-j", "DROP")
	sh(t, "ip", "link", "del", "cvg-dummy0")
	os.WriteFile("/proc/sys/net/ipv4/ip_forward", fwd, 0o644)
	undone, err := Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d := Diff(before, undone); len(d) != 0 {
		t.Errorf("after undoing every change the guard still reports: %v", d)
	}
}

func TestDiffCountsDuplicates(t *testing.T) {
	a := State{"routes": {"x", "x"}}
	b := State{"routes": {"x"}, "new": {"y"}}
	d := Diff(a, b)
	if len(d) != 2 || d[0] != "new: added: y" || d[1] != "routes: removed: x" {
		t.Errorf("Diff = %q", d)
	}
}
