package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckPublic(t *testing.T) {
	pool := DefaultPool
	for _, ok := range []string{"192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "198.18.0.0/15", "10.1.0.0/16", "100.64.0.0/16"} {
		if err := checkPublic([]netip.Prefix{netip.MustParsePrefix(ok)}, pool); err != nil {
			t.Errorf("public range %s refused: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"8.8.8.0/24":       "public already",
		"0.0.0.0/0":        "public already",
		"127.0.0.0/8":      "never a destination",
		"224.0.0.0/24":     "never a destination",
		"240.0.0.0/4":      "never a destination",
		"169.254.0.0/16":   "metadata address 169.254.169.254",
		"168.63.129.16/32": "metadata address 168.63.129.16",
		"192.0.0.0/24":     "metadata address 192.0.0.192",
		"100.64.0.0/10":    "metadata address 100.100.100.200",
		"10.222.1.0/24":    "pool",
		"10.0.0.0/8":       "pool",
	} {
		err := checkPublic([]netip.Prefix{netip.MustParsePrefix(bad)}, pool)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("public range %s: %v, want an error saying %q", bad, err, want)
		}
	}
	if err := checkPublic([]netip.Prefix{netip.MustParsePrefix("2001:db8::/32")}, pool); err == nil {
		t.Error("an IPv6 public range accepted")
	}
}

// TestSpecialRanges: which destinations the denied set leaves shut under
// which entries. An entry opens a special range only by naming an address
// or a prefix inside it; a metadata address only by naming it.
func TestSpecialRanges(t *testing.T) {
	_, l := testLink()
	for _, c := range []struct {
		entries []string
		public  []string
		open    []string
		shut    []string
	}{{
		entries: []string{"0.0.0.0/0"},
		open:    []string{"8.8.8.8", "1.1.1.1", "168.63.129.15", "198.20.0.1", "192.0.1.1", "192.31.196.1"},
		shut: []string{
			"169.254.169.254", "169.254.170.2", "168.63.129.16", "192.0.0.192", "100.100.100.200",
			"198.18.0.1", "198.19.255.254", "240.0.0.1", "255.255.255.255", "224.0.0.251", "239.1.2.3",
			"10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "192.0.0.9", "127.0.0.1", "0.1.2.3",
			"192.0.2.1", "198.51.100.1", "203.0.113.1", "10.222.0.9",
		},
	}, {
		entries: []string{"198.18.0.0/15"},
		open:    []string{"198.18.0.1", "198.19.255.254"},
		shut:    []string{"198.20.0.1", "8.8.8.8"},
	}, {
		entries: []string{"169.254.0.0/16"},
		open:    []string{"169.254.1.1"},
		shut:    []string{"169.254.169.254", "169.254.170.2"},
	}, {
		entries: []string{"169.254.169.254", "168.63.129.16:80"},
		open:    []string{"169.254.169.254", "168.63.129.16"},
		shut:    []string{"169.254.1.1"},
	}, {
		entries: []string{"168.63.0.0/16", "192.0.0.0/24", "100.64.0.0/10"},
		open:    []string{"168.63.1.1", "192.0.0.9", "100.64.0.1"},
		shut:    []string{"168.63.129.16", "192.0.0.192", "100.100.100.200"},
	}, {
		entries: []string{"0.0.0.0/0"},
		public:  []string{"192.0.2.0/24", "198.18.0.0/16"},
		open:    []string{"192.0.2.1", "198.18.0.1", "8.8.8.8"},
		shut:    []string{"198.19.0.1", "198.51.100.1", "169.254.169.254", "10.0.0.1"},
	}} {
		var public []netip.Prefix
		for _, p := range c.public {
			public = append(public, netip.MustParsePrefix(p))
		}
		steps := policySteps(l, nil, deniedSet(public), mustParse(t, c.entries...))
		for _, a := range c.open {
			if !decide(steps, nil, netip.MustParseAddr(a), protoTCP, 80) {
				t.Errorf("%v (public %v): %s shut, want open", c.entries, c.public, a)
			}
		}
		for _, a := range c.shut {
			if decide(steps, nil, netip.MustParseAddr(a), protoTCP, 80) {
				t.Errorf("%v (public %v): %s open, want shut", c.entries, c.public, a)
			}
		}
	}
}
