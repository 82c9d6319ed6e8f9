package netpolicy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpecialRangesStayShut: a catch-all policy does not open the special
// ranges; naming one opens it.
func TestSpecialRangesStayShut(t *testing.T) {
	tn := newTestNet(t)
	h := testHost(t, tn)
	gpath := tn.guest(1)
	g := nsRunner{gpath}
	a, err := h.Attach(context.Background(), "sb-special", mustParse(t, "0.0.0.0/0"), WithVethPeer(gpath, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	configureGuest(t, gpath, a)
	shut := []string{
		"169.254.169.254:80", "168.63.129.16:80", "192.0.0.192:80", "100.100.100.200:80",
		"198.18.0.1:80", "240.0.0.1:80", "10.99.0.1:80", "172.16.5.5:80", "100.64.0.9:80",
	}
	t.Run("control: the servers are there", func(t *testing.T) {
		for _, addr := range append(shut, "8.8.8.8:80", "203.0.113.7:80") {
			mustReach(t, tn.hostNS, addr)
		}
	})
	t.Run("0.0.0.0/0", func(t *testing.T) {
		mustReach(t, g, "8.8.8.8:80")
		mustReach(t, g, "203.0.113.7:80") // in a documentation range the test host declares public
		for _, addr := range shut {
			mustRefuse(t, g, addr)
		}
	})
	t.Run("named", func(t *testing.T) {
		if err := a.Update(mustParse(t, "0.0.0.0/0", "198.18.0.0/15", "169.254.169.254:80")); err != nil {
			t.Fatal(err)
		}
		mustReach(t, g, "198.18.0.1:80")
		mustReach(t, g, "169.254.169.254:80")
		for _, addr := range []string{"168.63.129.16:80", "192.0.0.192:80", "240.0.0.1:80", "10.99.0.1:80"} {
			mustRefuse(t, g, addr)
		}
	})
}

// TestNoIP6TablesNoStart: on a kernel with IPv6, a host whose ip6tables
// is missing does not start: it could not keep IPv6 off the links.
func TestNoIP6TablesNoStart(t *testing.T) {
	tn := newTestNet(t)
	bin := t.TempDir()
	for _, tool := range []string{"iptables", "iptables-restore", "iptables-save"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	_, err := NewHost(HostConfig{NetNS: tn.nsPath(tn.host), Upstreams: []string{"203.0.113.53:53"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "ip6tables") {
		t.Errorf("NewHost without ip6tables: %v, want a refusal naming ip6tables", err)
	}
}
