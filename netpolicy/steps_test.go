package netpolicy

import (
	"net"
	"net/netip"
	"testing"

	"github.com/cellvm/cellvm/sandbox/egress"

	"github.com/vishvananda/netlink"
)

func TestDecide(t *testing.T) {
	_, l := testLink()
	p := mustParse(t, "203.0.113.7", "198.51.100.0/24:443", "10.1.2.3", "0.0.0.0/0:22", "10.222.0.0/16")
	steps := policySteps(l, nil, deniedSet([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/24")}), p)
	pins := map[netip.Addr]*pin{
		netip.MustParseAddr("203.0.113.50"): {applied: true},
		netip.MustParseAddr("203.0.113.51"): {applied: true, ports: []uint16{443}},
		netip.MustParseAddr("203.0.113.52"): {applied: false}, // its rules failed
	}
	for _, c := range []struct {
		dst   string
		proto uint8
		port  uint16
		want  bool
	}{
		{"203.0.113.7", protoTCP, 80, true},
		{"203.0.113.7", 1, 0, true}, // an entry without a port allows ICMP too
		{"203.0.113.8", protoTCP, 80, false},
		{"198.51.100.9", protoTCP, 443, true},
		{"198.51.100.9", protoUDP, 443, true},
		{"198.51.100.9", protoTCP, 80, false},
		{"198.51.100.9", 1, 0, false}, // a port entry is TCP and UDP only
		{"10.1.2.3", protoTCP, 80, true},
		{"10.1.2.4", protoTCP, 80, false},
		{"8.8.8.8", protoTCP, 22, true},
		{"10.9.9.9", protoTCP, 22, false},        // 0.0.0.0/0:22 does not open 10/8
		{"169.254.169.254", protoTCP, 22, false}, // nor link-local
		{"10.222.0.9", protoTCP, 80, false},      // the pool, though listed
		{"203.0.113.50", protoTCP, 1234, true},
		{"203.0.113.51", protoTCP, 443, true},
		{"203.0.113.51", protoTCP, 80, false},
		{"203.0.113.52", protoTCP, 80, false},
	} {
		if got := decide(steps, pins, netip.MustParseAddr(c.dst), c.proto, c.port); got != c.want {
			t.Errorf("decide(%s proto %d port %d) = %v, want %v", c.dst, c.proto, c.port, got, c.want)
		}
	}
}

func TestRevokedFlowsFilter(t *testing.T) {
	guest := netip.MustParseAddr("10.222.0.6")
	f := revokedFlows{guest: guest, allowed: func(dst netip.Addr, proto uint8, port uint16) bool {
		return dst == netip.MustParseAddr("203.0.113.7") && proto == protoTCP && port == 80
	}}
	flow := func(src, dst string, proto uint8, port uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{FamilyType: 2, Forward: netlink.IPTuple{
			SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst), Protocol: proto, SrcPort: 40000, DstPort: port,
		}}
	}
	for _, c := range []struct {
		fl   *netlink.ConntrackFlow
		want bool
	}{
		{flow("10.222.0.6", "203.0.113.7", protoTCP, 80), false}, // allowed: kept
		{flow("10.222.0.6", "203.0.113.7", protoTCP, 81), true},
		{flow("10.222.0.6", "203.0.113.8", protoUDP, 80), true},
		{flow("10.222.0.10", "203.0.113.8", protoUDP, 80), false}, // another guest's
		{flow("192.0.2.9", "10.222.0.6", protoTCP, 80), false},    // not from the guest
	} {
		if got := f.MatchConntrackFlow(c.fl); got != c.want {
			t.Errorf("flow %v: match %v, want %v", c.fl.Forward, got, c.want)
		}
	}
}

// TestOperatorRules: the operator's closed ranges (HostConfig.Egress) are
// shut under a broad entry and under an entry that names them; what
// AllowPrivate opens is then a special range as before (open only when
// named), and a sandbox's own WithAllowPrivate opens more for it alone.
func TestOperatorRules(t *testing.T) {
	_, l := testLink()
	g := egress.NewGuard(
		[]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("203.0.113.70/32")},
		[]netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("169.254.0.0/16")})
	denied := deniedSet([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
	p := mustParse(t, "0.0.0.0/0", "10.1.2.3", "10.20.0.5", "169.254.169.254", "169.254.1.1", "203.0.113.70")
	for _, c := range []struct {
		name   string
		barred []netip.Prefix
		open   []string
		shut   []string
	}{{
		name:   "the operator's",
		barred: barredV4(g),
		open:   []string{"8.8.8.8", "203.0.113.71", "10.20.0.5", "169.254.1.1"},
		shut:   []string{"10.1.2.3", "10.20.0.6", "169.254.169.254", "169.254.170.2", "203.0.113.70", "192.168.1.1", "10.222.0.9"},
	}, {
		name:   "with the sandbox's own 10.1.0.0/16",
		barred: barredV4(g.WithAllowPrivate(netip.MustParsePrefix("10.1.0.0/16"))),
		open:   []string{"10.1.2.3", "10.20.0.5"},
		shut:   []string{"10.1.2.4", "10.2.0.1", "169.254.169.254", "203.0.113.70"},
	}, {
		name: "no operator rules",
		open: []string{"10.1.2.3", "169.254.169.254", "203.0.113.70"},
		shut: []string{"10.1.2.4", "169.254.170.2"},
	}} {
		steps := policySteps(l, c.barred, denied, p)
		for _, a := range c.open {
			if !decide(steps, nil, netip.MustParseAddr(a), protoTCP, 80) {
				t.Errorf("%s: %s shut, want open", c.name, a)
			}
		}
		for _, a := range c.shut {
			if decide(steps, nil, netip.MustParseAddr(a), protoTCP, 80) {
				t.Errorf("%s: %s open, want shut", c.name, a)
			}
			// DNS cannot open it either: denied, and no step opens it.
			if ip := netip.MustParseAddr(a); !deniedAddr(ip, l.Pool, denied, c.barred) || opens(steps, ip) {
				t.Errorf("%s: a DNS answer %s would be let through", c.name, a)
			}
		}
	}
	if !deniedAddr(netip.MustParseAddr("203.0.113.70"), l.Pool, denied, barredV4(g)) ||
		deniedAddr(netip.MustParseAddr("203.0.113.71"), l.Pool, denied, barredV4(g)) {
		t.Error("a DNS answer in the operator's range is pinned, or one beside it is not")
	}
	for _, b := range barredV4(g) {
		if !b.Addr().Is4() {
			t.Errorf("barred holds %v: iptables (IPv4) cannot take it", b)
		}
	}
}
