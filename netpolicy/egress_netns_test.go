package netpolicy

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cellvm/cellvm/sandbox/egress"
)

// TestOperatorRulesInTheKernel: with the operator's rules (the default
// deny list, the host's uplink network 192.0.2.0/24 and a public address
// the test's world serves, 203.0.113.70, added), a broad allow still
// refuses every denied range, and so does an entry naming one; the
// operator's --egress-allow-private (172.16.0.0/12) opens its range to an
// entry that names it, and a sandbox's own (WithAllowPrivate 10.99.0.0/16)
// opens its range for that sandbox alone, by address and by DNS. The
// metadata address stays shut whatever is opened.
func TestOperatorRulesInTheKernel(t *testing.T) {
	tn := newTestNet(t)
	deny := append(egress.DefaultDeny([]netip.Addr{netip.MustParseAddr("192.0.2.2")}, []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}),
		netip.MustParsePrefix("203.0.113.70/32"))
	guard := egress.NewGuard(deny, []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("169.254.0.0/16")})
	h := testHostWith(t, tn, func(c *HostConfig) { c.Egress = guard })
	ctx := context.Background()

	policy := mustParse(t, "0.0.0.0/0", "10.99.0.1", "169.254.169.254", "100.64.0.9", "203.0.113.70", "172.16.5.5", "rebind.test")
	g1path, g2path := tn.guest(1), tn.guest(2)
	g1, g2 := nsRunner{g1path}, nsRunner{g2path}
	a1, err := h.Attach(ctx, "sb-op-one", policy, WithVethPeer(g1path, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := h.Attach(ctx, "sb-op-two", policy, WithVethPeer(g2path, "eth0"), WithAllowPrivate(netip.MustParsePrefix("10.99.0.0/16")))
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	configureGuest(t, g1path, a1)
	configureGuest(t, g2path, a2)

	t.Run("control: the servers are there", func(t *testing.T) {
		for _, addr := range []string{"10.99.0.1:80", "169.254.169.254:80", "100.64.0.9:80", "203.0.113.70:80", "172.16.5.5:80", "192.0.2.1:80"} {
			mustReach(t, tn.hostNS, addr)
		}
	})
	t.Run("a broad allow and named entries do not open a denied range", func(t *testing.T) {
		mustReach(t, g1, "8.8.8.8:80")
		mustReach(t, g1, "203.0.113.7:80")
		for _, addr := range []string{
			"10.99.0.1:80", "169.254.169.254:80", "100.64.0.9:80", // named, denied
			"203.0.113.70:80", // public but in the operator's list, and named
			"192.0.2.1:80",    // the uplink network
			"198.18.0.1:80",   // a special range, under the broad entry only
		} {
			mustRefuse(t, g1, addr)
		}
	})
	t.Run("allow-private opens to an entry that names it", func(t *testing.T) {
		mustReach(t, g1, "172.16.5.5:80")
		if err := a1.Update(mustParse(t, "0.0.0.0/0")); err != nil {
			t.Fatal(err)
		}
		mustRefuse(t, g1, "172.16.5.5:80") // opened by name only, as a special range
		mustRefuse(t, g1, "10.99.0.1:80")
		if err := a1.Update(policy); err != nil {
			t.Fatal(err)
		}
		mustReach(t, g1, "172.16.5.5:80")
	})
	t.Run("a sandbox's own allow-private", func(t *testing.T) {
		mustReach(t, g2, "10.99.0.1:80")
		mustRefuse(t, g1, "10.99.0.1:80")
		for _, addr := range []string{"169.254.169.254:80", "100.64.0.9:80", "203.0.113.70:80"} {
			mustRefuse(t, g2, addr)
		}
	})
	t.Run("DNS answers in a denied range are removed", func(t *testing.T) {
		// rebind.test answers 10.99.0.1, 169.254.169.254 and 203.0.113.50;
		// both sandboxes list 10.99.0.1 and 169.254.169.254 by address.
		if _, addrs := lookup(t, g1, a1.DNS, "rebind.test"); fmt.Sprint(addrs) != "[203.0.113.50]" {
			t.Errorf("rebind.test in sb-op-one: %v, want only the public address", addrs)
		}
		if _, addrs := lookup(t, g2, a2.DNS, "rebind.test"); fmt.Sprint(addrs) != "[10.99.0.1 203.0.113.50]" {
			t.Errorf("rebind.test in sb-op-two (10.99.0.0/16 its own): %v, want 10.99.0.1 and the public address", addrs)
		}
		mustReach(t, g1, "203.0.113.50:80")
		mustRefuse(t, g1, "10.99.0.1:80")
	})
}
