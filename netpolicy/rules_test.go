package netpolicy

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress"
)

func testLink() (objectNames, linkAddrs) {
	return namesFor("0123abcd"), linkAddrs{
		Gateway: netip.MustParseAddr("10.222.0.5"),
		Guest:   netip.MustParseAddr("10.222.0.6"),
		Pool:    netip.MustParsePrefix("10.222.0.0/16"),
	}
}

func specs(rs []rule) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Table+" "+r.Chain+" "+strings.Join(r.Spec, " "))
	}
	return out
}

func TestPolicyRules(t *testing.T) {
	n, l := testLink()
	p, err := egress.Parse([]string{"pypi.org", "203.0.113.7", "198.51.100.0/24:443", "10.1.2.3", "0.0.0.0/0:22"})
	if err != nil {
		t.Fatal(err)
	}
	denied := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("169.254.169.254/32"),
	}
	got := specs(policyRules(n, 1, l, policySteps(l, nil, denied, p)))
	want := []string{
		"filter CELLVM-0123abcd-1 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"filter CELLVM-0123abcd-1 ! -s 10.222.0.6/32 -j CELLVM-0123abcd-R",
		"filter CELLVM-0123abcd-1 -d 10.222.0.0/16 -j CELLVM-0123abcd-R",
		// Most specific first, an entry before a denied range of the same
		// length: 10.1.2.3 (listed inside a denied range) before
		// 10.0.0.0/8.
		"filter CELLVM-0123abcd-1 -d 203.0.113.7/32 -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-1 -d 10.1.2.3/32 -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-1 -d 169.254.169.254/32 -j CELLVM-0123abcd-R",
		"filter CELLVM-0123abcd-1 -d 198.51.100.0/24 -p tcp --dport 443 -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-1 -d 198.51.100.0/24 -p udp --dport 443 -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-1 -d 169.254.0.0/16 -j CELLVM-0123abcd-R",
		"filter CELLVM-0123abcd-1 -d 10.0.0.0/8 -j CELLVM-0123abcd-R",
		// 0.0.0.0/0 is after the denied ranges: it does not open them.
		"filter CELLVM-0123abcd-1 -d 0.0.0.0/0 -p tcp --dport 22 -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-1 -d 0.0.0.0/0 -p udp --dport 22 -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-1 -j CELLVM-0123abcd-P",
		"filter CELLVM-0123abcd-1 -j CELLVM-0123abcd-R",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("policy rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestPolicyRulesEmptyRefusesAll(t *testing.T) {
	n, l := testLink()
	got := specs(policyRules(n, 0, l, policySteps(l, nil, deniedSet(nil), egress.Policy{})))
	for _, r := range got {
		if strings.HasSuffix(r, "-j "+n.accept) {
			t.Errorf("empty policy accepts: %s", r)
		}
	}
	if last := got[len(got)-1]; last != "filter CELLVM-0123abcd-0 -j CELLVM-0123abcd-R" {
		t.Errorf("last rule %q, want the reject", last)
	}
}

func TestRejectAndAcceptRules(t *testing.T) {
	n, l := testLink()
	got := specs(append(acceptRules(n), rejectRules(n, l)...))
	want := []string{
		"filter CELLVM-0123abcd-A -j ACCEPT",
		"filter CELLVM-0123abcd-R ! -s 10.222.0.6/32 -j DROP",
		"filter CELLVM-0123abcd-R -p tcp -j REJECT --reject-with tcp-reset",
		"filter CELLVM-0123abcd-R -j REJECT --reject-with icmp-port-unreachable",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBaseRules(t *testing.T) {
	n, l := testLink()
	got := specs(append(baseRules(n, l, "eth0"), jumpRule(n, 0)))
	want := []string{
		"raw CELLVM-PRE -i cvm-0123abcd ! -s 10.222.0.6/32 -j DROP",
		"filter CELLVM-FWD -o cvm-0123abcd -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"filter CELLVM-IN -i cvm-0123abcd -d 10.222.0.5/32 -p udp --dport 53 -j ACCEPT",
		"filter CELLVM-IN -i cvm-0123abcd -d 10.222.0.5/32 -p tcp --dport 53 -j ACCEPT",
		"filter CELLVM-IN -i cvm-0123abcd -j CELLVM-0123abcd-R",
		"nat CELLVM-POST -s 10.222.0.6/32 -o eth0 -m comment --comment cvm-0123abcd -j MASQUERADE",
		"filter CELLVM-FWD -i cvm-0123abcd -j CELLVM-0123abcd-0",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	nat := specs(baseRules(n, l, ""))[5]
	if nat != "nat CELLVM-POST -s 10.222.0.6/32 ! -o cvm-0123abcd -m comment --comment cvm-0123abcd -j MASQUERADE" {
		t.Errorf("nat rule without uplink: %s", nat)
	}
}

func TestPinRules(t *testing.T) {
	n, _ := testLink()
	a := netip.MustParseAddr("203.0.113.50")
	stop := time.Date(2026, 12, 1, 10, 0, 5, 0, time.FixedZone("CET", 3600))
	if got := specs(pinRules(n, a, nil, stop, "")); !reflect.DeepEqual(got, []string{
		"filter CELLVM-0123abcd-P -d 203.0.113.50/32 -m time --datestop 2026-12-01T09:00:05 -j CELLVM-0123abcd-A",
	}) {
		t.Errorf("all ports: %q", got)
	}
	if got := specs(pinRules(n, a, []uint16{80, 443}, stop, "a.test,b.test")); !reflect.DeepEqual(got, []string{
		"filter CELLVM-0123abcd-P -d 203.0.113.50/32 -p tcp --dport 80 -m time --datestop 2026-12-01T09:00:05 -m comment --comment a.test,b.test -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-P -d 203.0.113.50/32 -p udp --dport 80 -m time --datestop 2026-12-01T09:00:05 -m comment --comment a.test,b.test -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-P -d 203.0.113.50/32 -p tcp --dport 443 -m time --datestop 2026-12-01T09:00:05 -m comment --comment a.test,b.test -j CELLVM-0123abcd-A",
		"filter CELLVM-0123abcd-P -d 203.0.113.50/32 -p udp --dport 443 -m time --datestop 2026-12-01T09:00:05 -m comment --comment a.test,b.test -j CELLVM-0123abcd-A",
	}) {
		t.Errorf("ports 80, 443: %q", got)
	}
}

func TestParsePinRule(t *testing.T) {
	n, _ := testLink()
	for _, c := range []struct {
		line  string
		ip    string // "" if not a pin
		stop  string
		names string
	}{
		{"-A CELLVM-0123abcd-P -d 203.0.113.50/32 -p tcp -m tcp --dport 443 -m time --datestop 2026-12-01T10:00:05 -m comment --comment a.test,b.test -j CELLVM-0123abcd-A",
			"203.0.113.50", "2026-12-01T10:00:05Z", "[a.test b.test]"},
		{`-A CELLVM-0123abcd-P -d 203.0.113.51/32 -m time --datestop 2026-12-01T10:00:05 -m comment --comment "x.test" -j CELLVM-0123abcd-A`,
			"203.0.113.51", "2026-12-01T10:00:05Z", "[x.test]"},
		{"-A CELLVM-0123abcd-P -d 203.0.113.52/32 -m time --datestop 2026-12-01T10:00:05 -m comment --comment BAD.name,ok.test -j CELLVM-0123abcd-A",
			"203.0.113.52", "2026-12-01T10:00:05Z", "[ok.test]"},
		{"-A CELLVM-0123abcd-P -d 203.0.113.50/32 -j CELLVM-0123abcd-A", "", "", ""}, // no stop: not a pin of ours
		{"-A CELLVM-0123abcd-P -d 203.0.113.0/24 -m time --datestop 2026-12-01T10:00:05 -j CELLVM-0123abcd-A", "", "", ""},
		{"-A CELLVM-0123abcd-P -d 203.0.113.50/32 -m time --datestop tomorrow -j CELLVM-0123abcd-A", "", "", ""},
		{"-A CELLVM-ffffffff-P -d 203.0.113.50/32 -m time --datestop 2026-12-01T10:00:05 -j X", "", "", ""},
		{"-N CELLVM-0123abcd-P", "", "", ""},
	} {
		ip, stop, names, ok := parsePinRule(c.line, n.pins)
		if !ok {
			if c.ip != "" {
				t.Errorf("%q: not read as a pin", c.line)
			}
			continue
		}
		if c.ip == "" || ip.String() != c.ip || stop.Format(time.RFC3339) != c.stop || fmt.Sprint(names) != c.names {
			t.Errorf("%q: %v %v %v, want %s %s %s", c.line, ip, stop.Format(time.RFC3339), names, c.ip, c.stop, c.names)
		}
	}
}

func TestKernelStopAndLabel(t *testing.T) {
	base := time.Unix(1_800_000_000, 0) // a multiple of the grain
	for off, want := range map[time.Duration]time.Duration{0: 0, time.Millisecond: pinStopGrain, pinStopGrain - 1: pinStopGrain, pinStopGrain + 1: 2 * pinStopGrain} {
		if got := kernelStop(base.Add(off)).Sub(base); got != want {
			t.Errorf("kernelStop(+%v) = +%v, want +%v", off, got, want)
		}
	}
	names := map[string]bool{"b.test": true, "a.test": true, `x\.y`: true, "UPPER.test": true}
	if got := pinLabel(names); got != "a.test,b.test" {
		t.Errorf("label %q, want the host names in order", got)
	}
	many := map[string]bool{}
	for i := 0; i < 64; i++ {
		many[fmt.Sprintf("name-%02d.example.com", i)] = true
	}
	if got := pinLabel(many); len(got) > maxLabel || !strings.HasPrefix(got, "name-00.example.com,") || strings.HasSuffix(got, ",") {
		t.Errorf("label of 64 names: %d bytes %q", len(got), got)
	}
}

func TestDeniedAddr(t *testing.T) {
	pool := netip.MustParsePrefix("10.222.0.0/16")
	denied := deniedSet(nil)
	public := deniedSet([]netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")})
	for a, want := range map[string]bool{
		"169.254.169.254": true, "10.0.0.1": true, "172.31.255.255": true, "172.32.0.1": false,
		"192.168.1.1": true, "100.64.0.1": true, "100.128.0.1": false, "127.0.0.1": true,
		"0.0.0.0": true, "224.0.0.251": true, "255.255.255.255": true, "10.222.0.6": true,
		"168.63.129.16": true, "192.0.0.192": true, "198.18.0.1": true, "198.19.255.255": true,
		"198.20.0.1": false, "240.0.0.1": true, "192.0.2.1": true, "203.0.113.50": true,
		"8.8.8.8": false, "2001:db8::1": true, "::ffff:8.8.8.8": false,
	} {
		if got := deniedAddr(netip.MustParseAddr(a), pool, denied); got != want {
			t.Errorf("deniedAddr(%s) = %v, want %v", a, got, want)
		}
	}
	// A public range: answers into it are pinned like any public one.
	for a, want := range map[string]bool{"203.0.113.50": false, "198.51.100.1": true, "10.0.0.1": true} {
		if got := deniedAddr(netip.MustParseAddr(a), pool, public); got != want {
			t.Errorf("with 203.0.113.0/24 public: deniedAddr(%s) = %v, want %v", a, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	tag := Tag("sb-0123456789ab")
	if !isTag(tag) || tag != Tag("sb-0123456789ab") || tag == Tag("sb-0123456789ac") {
		t.Fatalf("Tag: %q", tag)
	}
	n := namesFor(tag)
	if len(n.link) > 15 {
		t.Errorf("link name %q longer than IFNAMSIZ-1", n.link)
	}
	for _, c := range n.chains() {
		if len(c) > 28 {
			t.Errorf("chain name %q longer than 28", c)
		}
		if tagOfChain(c) != tag {
			t.Errorf("tagOfChain(%q) = %q", c, tagOfChain(c))
		}
	}
	if tagOfLink(n.link) != tag {
		t.Errorf("tagOfLink(%q) = %q", n.link, tagOfLink(n.link))
	}
	for _, c := range []string{fwdChain, inChain, postChain, "CELLVM-0123abcdX", "FORWARD", "CELLVM-0123ABCD", "CELLVM-0123abc"} {
		if tagOfChain(c) != "" {
			t.Errorf("tagOfChain(%q) = %q, want none", c, tagOfChain(c))
		}
	}
	for _, l := range []string{"cvm-0123abc", "cvm-0123abcde", "eth0", "cvm-0123ABCD", "cvm+"} {
		if tagOfLink(l) != "" {
			t.Errorf("tagOfLink(%q) = %q, want none", l, tagOfLink(l))
		}
	}
}

func TestRuleOf(t *testing.T) {
	n := namesFor("0123abcd")
	for listed, want := range map[string]bool{
		"-A CELLVM-FWD -i cvm-0123abcd -j CELLVM-0123abcd-0":                                          true,
		"-A CELLVM-FWD -i cvm-99999999 -j CELLVM-99999999-0":                                          false,
		"-A CELLVM-FWD -i cvm+ -j DROP":                                                               false,
		"-A CELLVM-POST -s 10.222.0.6/32 -o eth0 -m comment --comment \"cvm-0123abcd\" -j MASQUERADE": true,
		"-N CELLVM-FWD": false,
	} {
		spec, ok := ruleOf(listed, strings.Fields(listed)[1], n)
		if ok != want {
			t.Errorf("ruleOf(%q) = %v", listed, ok)
		}
		if ok && strings.Contains(strings.Join(spec, " "), `"`) {
			t.Errorf("ruleOf(%q) kept quotes: %q", listed, spec)
		}
	}
}

func TestAllocator(t *testing.T) {
	a, err := newAllocator(netip.MustParsePrefix("10.222.0.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	s0, err := a.allocate("aaaaaaaa")
	if err != nil || s0 != 0 {
		t.Fatalf("first slot %d, %v", s0, err)
	}
	l := a.slotAddrs(0)
	if l.Gateway.String() != "10.222.0.1" || l.Guest.String() != "10.222.0.2" {
		t.Errorf("slot 0: %+v", l)
	}
	if s, err := a.allocate("bbbbbbbb"); err != nil || s != 1 || a.slotAddrs(1).Guest.String() != "10.222.0.6" {
		t.Errorf("second slot %d, %v", s, err)
	}
	if _, err := a.allocate("cccccccc"); err != ErrPoolFull {
		t.Errorf("third slot in a /29: %v, want ErrPoolFull", err)
	}
	if a.slotOf(netip.MustParseAddr("10.222.0.5")) != 1 || a.slotOf(netip.MustParseAddr("10.222.0.6")) != -1 {
		t.Error("slotOf")
	}
	a.release("aaaaaaaa")
	if s, err := a.allocate("cccccccc"); err != nil || s != 0 {
		t.Errorf("after release: %d, %v", s, err)
	}
	if err := a.reserve("dddddddd", 1); err == nil {
		t.Error("reserve of a used slot succeeded")
	}
	for _, bad := range []string{"203.0.113.0/24", "10.0.0.0/31", "10.0.0.1/16", "fd00::/64"} {
		if _, err := newAllocator(netip.MustParsePrefix(bad)); err == nil {
			t.Errorf("newAllocator(%s) succeeded", bad)
		}
	}
}
