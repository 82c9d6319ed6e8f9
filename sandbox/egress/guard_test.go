package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, x := range s {
		out[i] = netip.MustParsePrefix(x)
	}
	return out
}

// testGuard is a host's default: its address 203.0.113.10 on the uplink
// network 203.0.113.0/26.
func testGuard(allowPrivate ...string) Guard {
	return NewGuard(DefaultDeny([]netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8::10")},
		prefixes("203.0.113.0/26")), prefixes(allowPrivate...))
}

func TestGuardRefuses(t *testing.T) {
	g := testGuard()
	for _, c := range []struct {
		allow []string
		index int
		rng   string
		meta  bool
	}{
		{[]string{"169.254.169.254"}, 0, "169.254.0.0/16", true},
		{[]string{"pypi.org", "169.254.169.254:80"}, 1, "169.254.0.0/16", true},
		{[]string{"10.0.0.0/8"}, 0, "10.0.0.0/8", false},
		{[]string{"10.1.2.0/24:443"}, 0, "10.0.0.0/8", false},
		{[]string{"192.168.1.1"}, 0, "192.168.0.0/16", false},
		{[]string{"172.31.255.255"}, 0, "172.16.0.0/12", false},
		{[]string{"100.100.100.200"}, 0, "100.64.0.0/10", true},
		{[]string{"100.64.0.1"}, 0, "100.64.0.0/10", false},
		{[]string{"168.63.129.16"}, 0, "168.63.129.16/32", true},
		{[]string{"192.0.0.192"}, 0, "192.0.0.192/32", true},
		{[]string{"127.0.0.1"}, 0, "127.0.0.0/8", false},
		{[]string{"0.0.0.0/0", "169.254.169.254/32"}, 1, "169.254.0.0/16", true},
		{[]string{"8.8.8.8", "203.0.113.10"}, 1, "203.0.113.0/26", false}, // the host, in its network
		{[]string{"203.0.113.0/26"}, 0, "203.0.113.0/26", false},          // the uplink network
		{[]string{"203.0.113.32/27:22"}, 0, "203.0.113.0/26", false},
		// IPv6 (Parse refuses it too, but the check stands alone).
		{[]string{"fe80::1"}, 0, "fe80::/10", false},
		{[]string{"[fe80::1]:80"}, 0, "fe80::/10", false},
		{[]string{"fd00:ec2::254"}, 0, "fc00::/7", true},
		{[]string{"fd12:3456::/32"}, 0, "fc00::/7", false},
		{[]string{"::1"}, 0, "::1/128", false},
		{[]string{"2001:db8::10"}, 0, "2001:db8::10/128", false},
		{[]string{"fe80::1%eth0"}, 0, "fe80::/10", false},
		{[]string{"::ffff:169.254.169.254"}, 0, "169.254.0.0/16", true}, // IPv4-mapped
		{[]string{"::ffff:10.0.0.0/104"}, 0, "10.0.0.0/8", false},
	} {
		err := g.Check(c.allow)
		var de *DeniedError
		if !errors.As(err, &de) || !errors.Is(err, ErrDenied) {
			t.Errorf("Check(%q) = %v, want a *DeniedError", c.allow, err)
			continue
		}
		if de.Index != c.index || de.Range != netip.MustParsePrefix(c.rng) || de.Metadata != c.meta {
			t.Errorf("Check(%q) = %+v, want index %d, range %s, metadata %v", c.allow, de, c.index, c.rng, c.meta)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.rng) || !strings.Contains(msg, c.allow[c.index]) || !strings.Contains(msg, "--egress-deny") {
			t.Errorf("Check(%q): %q does not name the entry, the range and the flag", c.allow, msg)
		}
	}
}

func TestGuardMessage(t *testing.T) {
	err := testGuard().Check([]string{"0.0.0.0/0", "169.254.169.254/32"})
	want := `network.allow[1] "169.254.169.254/32" lies in the operator's denied range 169.254.0.0/16 (serve --egress-deny): a cloud metadata address, which no rule opens`
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	err = testGuard().Check([]string{"10.0.0.0/8"})
	if err == nil || !strings.HasPrefix(err.Error(), `network.allow[0] "10.0.0.0/8" names the operator's denied range 10.0.0.0/8`) ||
		!strings.Contains(err.Error(), "--egress-allow-private") {
		t.Errorf("got %v, want the entry naming the range and the way to open it", err)
	}
}

func TestGuardPasses(t *testing.T) {
	g := testGuard()
	for _, allow := range [][]string{
		nil,
		{"0.0.0.0/0"},
		{"8.8.8.8"},
		{"::/0"},
		{"8.0.0.0/5"},   // holds 10.0.0.0/8 strictly: enforcement keeps it shut
		{"128.0.0.0/1"}, // holds 169.254/16, 172.16/12, 192.168/16 and more
		{"169.254.0.0/15"},
		{"203.0.113.0/24"}, // holds the uplink network
		{"203.0.113.64"},   // beside it
		{"pypi.org", "*.pythonhosted.org", "10.0.0.1.nip.io"}, // names: their answers are checked
		{"1.1.1.1:53", "2001:db8::1"},
		{"not an entry", "10.0.0.0/99", "1.2.3.4/", "/8"}, // Parse's to refuse
	} {
		if err := g.Check(allow); err != nil {
			t.Errorf("Check(%q) = %v, want nil", allow, err)
		}
	}
	if err := (Guard{}).Check([]string{"169.254.169.254", "10.0.0.0/8"}); err != nil {
		t.Errorf("the zero Guard refused: %v", err)
	}
	if err := g.Check(make([]string, MaxEntries+1)); !errors.Is(err, ErrInvalidPolicy) {
		t.Errorf("Check of %d entries = %v, want ErrInvalidPolicy", MaxEntries+1, err)
	}
}

func TestGuardAllowPrivate(t *testing.T) {
	g := testGuard("10.20.0.0/16", "192.168.1.0/24", "fd12::/16")
	for _, allow := range [][]string{
		{"10.20.0.0/16"}, {"10.20.3.4:5432"}, {"192.168.1.1"}, {"192.168.1.0/25"}, {"fd12::1"},
	} {
		if err := g.Check(allow); err != nil {
			t.Errorf("with allow-private: Check(%q) = %v, want nil", allow, err)
		}
	}
	// Partly opened: refused, naming the denied range.
	for allow, rng := range map[string]string{
		"10.20.0.0/15":   "10.0.0.0/8",
		"10.0.0.0/8":     "10.0.0.0/8",
		"192.168.0.0/23": "192.168.0.0/16",
		"192.168.2.1":    "192.168.0.0/16",
		"fd00::/8":       "fc00::/7",
	} {
		var de *DeniedError
		if err := g.Check([]string{allow}); !errors.As(err, &de) || de.Range.String() != rng {
			t.Errorf("with allow-private: Check(%q) = %v, want refused in %s", allow, err, rng)
		}
	}
	// Opened by two ranges together.
	g2 := testGuard("10.20.0.0/16", "10.21.0.0/16")
	if err := g2.Check([]string{"10.20.0.0/15"}); err != nil {
		t.Errorf("10.20.0.0/15 opened by its two halves: %v", err)
	}
	// A tenant's own ranges on top of the operator's; the operator's
	// guard is unchanged.
	tg := g.WithAllowPrivate(netip.MustParsePrefix("172.16.0.0/12"))
	if err := tg.Check([]string{"172.20.1.1", "10.20.0.1"}); err != nil {
		t.Errorf("tenant's guard: %v", err)
	}
	if err := g.Check([]string{"172.20.1.1"}); err == nil {
		t.Error("the tenant's allow-private leaked into the operator's guard")
	}
}

func TestGuardNeverOpensMetadata(t *testing.T) {
	g := testGuard("169.254.0.0/16", "100.64.0.0/10", "fc00::/7", "168.63.129.0/24", "0.0.0.0/0")
	// 168.63.129.0/24 holds the wire server strictly: it passes, and the
	// address stays in Closed.
	if err := g.Check([]string{"169.254.1.1", "100.64.0.1", "10.1.1.1", "168.63.129.0/24"}); err != nil {
		t.Errorf("allow-private ranges: %v", err)
	}
	for _, e := range []string{"169.254.169.254", "169.254.170.2", "100.100.100.200", "168.63.129.16", "fd00:ec2::254", "169.254.169.0/24"} {
		var de *DeniedError
		if err := g.Check([]string{e}); !errors.As(err, &de) || !de.Metadata {
			t.Errorf("Check(%q) with everything opened = %v, want refused as metadata", e, err)
		}
	}
	closed := g.Closed()
	for _, m := range []string{"169.254.169.254/32", "100.100.100.200/32", "168.63.129.16/32", "fd00:ec2::254/128", "192.0.0.192/32"} {
		if !slices.Contains(closed, netip.MustParsePrefix(m)) {
			t.Errorf("Closed() = %v lacks %s", closed, m)
		}
	}
}

func TestNewGuardAlwaysDeniesMetadata(t *testing.T) {
	g := NewGuard(prefixes("198.18.0.0/15"), nil)
	for _, e := range []string{"169.254.169.254", "169.254.1.1", "fe80::1", "100.100.100.200", "198.18.0.1"} {
		if err := g.Check([]string{e}); !errors.Is(err, ErrDenied) {
			t.Errorf("--egress-deny 198.18.0.0/15: Check(%q) = %v, want refused", e, err)
		}
	}
	if err := g.Check([]string{"10.0.0.1"}); err != nil {
		t.Errorf("an operator's own list replaces the default: %v", err)
	}
}

func TestClosed(t *testing.T) {
	g := NewGuard(prefixes("10.0.0.0/8"), prefixes("10.0.0.0/9"))
	want := []netip.Prefix{netip.MustParsePrefix("10.128.0.0/9")}
	got := g.Closed()
	var v4 []netip.Prefix
	for _, p := range got {
		if p.Addr().Is4() && !within(p, netip.MustParsePrefix("169.254.0.0/16")) && p.Bits() != 32 {
			v4 = append(v4, p)
		}
	}
	if !slices.Equal(v4, want) {
		t.Errorf("Closed() = %v, want 10.128.0.0/9 among link-local and metadata", got)
	}
	// Every denied address not opened is in exactly one closed prefix.
	g = testGuard("10.20.0.0/16", "169.254.0.0/16")
	closed := g.Closed()
	for _, a := range []string{"10.0.0.1", "10.21.0.1", "169.254.169.254", "192.168.0.1", "203.0.113.10"} {
		n := 0
		for _, p := range closed {
			if p.Contains(netip.MustParseAddr(a)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s is in %d closed prefixes, want 1: %v", a, n, closed)
		}
	}
	for _, a := range []string{"10.20.0.1", "169.254.1.1", "8.8.8.8"} {
		for _, p := range closed {
			if p.Contains(netip.MustParseAddr(a)) {
				t.Errorf("%s is closed (%v), want open", a, p)
			}
		}
	}
}

func TestDefaultDeny(t *testing.T) {
	d := DefaultDeny([]netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("fe80::1%eth0")},
		prefixes("198.51.100.0/24", "192.168.7.0/24"))
	for _, want := range []string{
		"169.254.0.0/16", "fe80::/10", "fd00::/8", "127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12",
		"192.168.0.0/16", "fc00::/7", "100.64.0.0/10", "168.63.129.16/32", "198.51.100.0/24",
	} {
		p := netip.MustParsePrefix(want)
		held := false
		for _, x := range d {
			held = held || within(p, x)
		}
		if !held {
			t.Errorf("DefaultDeny = %v does not hold %s", d, want)
		}
	}
	// Normalized: nothing inside another.
	for i, p := range d {
		for j, q := range d {
			if i != j && within(p, q) {
				t.Errorf("DefaultDeny holds %v inside %v", p, q)
			}
		}
	}
}

func TestParseRanges(t *testing.T) {
	got, err := ParseRanges([]string{"10.0.0.0/8", " 192.0.2.1 ", "fd00:ec2::254", "::ffff:10.1.0.0/112"})
	if err != nil {
		t.Fatal(err)
	}
	want := prefixes("10.0.0.0/8", "192.0.2.1/32", "fd00:ec2::254/128", "10.1.0.0/16")
	if !slices.Equal(got, want) {
		t.Errorf("ParseRanges = %v, want %v", got, want)
	}
	for in, msg := range map[string]string{
		"":             "empty",
		"10.0.0.1/8":   "did you mean 10.0.0.0/8",
		"10.0.0.0/33":  "want a CIDR",
		"fe80::1%eth0": "want a CIDR",
		"example.com":  "want a CIDR",
	} {
		if _, err := ParseRanges([]string{in}); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseRanges(%q) = %v, want %q", in, err, msg)
		}
	}
	if _, err := ParseRanges(make([]string, MaxRanges+1)); err == nil {
		t.Error("no limit on the number of ranges")
	}
}

func TestSubtract(t *testing.T) {
	for _, c := range []struct {
		r, p string
		want string
	}{
		{"10.0.0.0/8", "192.168.0.0/16", "[10.0.0.0/8]"},
		{"10.0.0.0/8", "10.0.0.0/8", "[]"},
		{"10.0.0.0/8", "0.0.0.0/0", "[]"},
		{"198.18.0.0/15", "198.18.0.0/16", "[198.19.0.0/16]"},
		{"198.18.0.0/15", "198.19.0.0/16", "[198.18.0.0/16]"},
		{"192.0.0.0/24", "192.0.0.128/26", "[192.0.0.0/25 192.0.0.192/26]"},
		{"10.0.0.0/30", "10.0.0.1/32", "[10.0.0.0/32 10.0.0.2/31]"},
	} {
		got := subtract(netip.MustParsePrefix(c.r), netip.MustParsePrefix(c.p))
		if fmt.Sprint(got) != c.want {
			t.Errorf("%s - %s = %v, want %s", c.r, c.p, got, c.want)
		}
	}
}

func TestWithout(t *testing.T) {
	got := Without(prefixes("10.0.0.0/8"), prefixes("10.1.2.3/32"))
	if len(got) != 24 {
		t.Errorf("10.0.0.0/8 less a /32: %d prefixes, want 24", len(got))
	}
	for _, p := range got {
		if p.Contains(netip.MustParseAddr("10.1.2.3")) {
			t.Errorf("%v holds the address taken out", p)
		}
	}
	if got := Without(prefixes("::/0"), prefixes("::/0")); len(got) != 0 {
		t.Errorf("::/0 less itself = %v", got)
	}
	if got := Without(prefixes("10.0.0.0/8"), prefixes("::/0")); !slices.Equal(got, prefixes("10.0.0.0/8")) {
		t.Errorf("IPv4 less IPv6 = %v", got)
	}
	if got := Without(prefixes("2001:db8::/32"), prefixes("2001:db8::1/128")); len(got) != 96 {
		t.Errorf("a /32 less a /128: %d prefixes, want 96", len(got))
	}
}

// FuzzGuardCheck: any allowlist, any rules: Check never panics, and what
// it refuses lies in a denied range that AllowPrivate does not open whole.
func FuzzGuardCheck(f *testing.F) {
	for _, s := range []string{"169.254.169.254", "0.0.0.0/0\n169.254.169.254/32", "[fe80::1]:80", "::ffff:10.0.0.1", "10.0.0.0/8:443", "fe80::1%zone", "[::1", "a:b:c", "1.2.3.4/", "/8"} {
		f.Add(s, "10.20.0.0/16,fc00::/8")
	}
	f.Fuzz(func(t *testing.T, allow, private string) {
		var ap []netip.Prefix
		for _, s := range strings.Split(private, ",") {
			if p, err := netip.ParsePrefix(s); err == nil && len(ap) < 8 {
				ap = append(ap, p)
			}
		}
		entries := strings.Split(allow, "\n")
		if len(entries) > MaxEntries {
			entries = entries[:MaxEntries]
		}
		g := testGuard().WithAllowPrivate(ap...)
		err := g.Check(entries)
		var de *DeniedError
		if err == nil {
			return
		}
		if !errors.As(err, &de) {
			t.Fatalf("Check(%q) = %v, not a *DeniedError", entries, err)
		}
		p, ok := entryPrefix(entries[de.Index])
		if !ok || !within(p, de.Range) {
			t.Fatalf("Check(%q) refused %q, which is not in %v", entries, entries[de.Index], de.Range)
		}
		_ = de.Error()
		_ = g.Closed()
	})
}
