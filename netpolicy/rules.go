package netpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// Names of kernel objects. Everything per VM carries the sandbox's tag so
// that Sweep can tell whose it is; the host-wide chains are fixed.
const (
	linkPrefix  = "cvm-"
	chainPrefix = "CELLVM-"

	fwdChain  = "CELLVM-FWD"  // filter, jumped to from FORWARD
	inChain   = "CELLVM-IN"   // filter, jumped to from INPUT
	postChain = "CELLVM-POST" // nat, jumped to from POSTROUTING
	preChain  = "CELLVM-PRE"  // raw, jumped to from PREROUTING
)

// baseChains are the host-wide chains, each with the built-in chain that
// jumps to it.
var baseChains = []struct{ table, chain, from string }{
	{"raw", preChain, "PREROUTING"},
	{"filter", fwdChain, "FORWARD"},
	{"filter", inChain, "INPUT"},
	{"nat", postChain, "POSTROUTING"},
}

// Tag returns the 8 hex digits that name a sandbox's kernel objects: the
// start of the SHA-256 of its id. A hash fits any id into the 15 bytes of
// an interface name; the link's alias carries the full id for people.
func Tag(sandboxID string) string {
	sum := sha256.Sum256([]byte(sandboxID))
	return hex.EncodeToString(sum[:4])
}

// objectNames are the names of one VM's kernel objects.
type objectNames struct {
	tag  string
	link string // cvm-<tag>
	// policy are the two generations of the policy chain; Update builds
	// the other one and swaps the jump, so no packet ever sees a half
	// built chain.
	policy [2]string // CELLVM-<tag>-0, CELLVM-<tag>-1
	pins   string    // CELLVM-<tag>-P: addresses handed out by DNS
	accept string    // CELLVM-<tag>-A: one ACCEPT, counts allowed
	reject string    // CELLVM-<tag>-R: drop spoofed, reject the rest; counts dropped
}

func namesFor(tag string) objectNames {
	c := chainPrefix + tag
	return objectNames{
		tag:    tag,
		link:   linkPrefix + tag,
		policy: [2]string{c + "-0", c + "-1"},
		pins:   c + "-P",
		accept: c + "-A",
		reject: c + "-R",
	}
}

// chains lists every per-VM chain, in the order they can be deleted
// (after the base rules that jump to them are gone).
func (n objectNames) chains() []string {
	return []string{n.policy[0], n.policy[1], n.pins, n.accept, n.reject}
}

// tagOfChain returns the tag of a per-VM chain name, or "" for any other.
func tagOfChain(chain string) string {
	if len(chain) < len(chainPrefix)+8 || chain[:len(chainPrefix)] != chainPrefix {
		return ""
	}
	tag := chain[len(chainPrefix) : len(chainPrefix)+8]
	if !isTag(tag) || len(chain) > len(chainPrefix)+8 && chain[len(chainPrefix)+8] != '-' {
		return ""
	}
	return tag
}

// tagOfLink returns the tag of a cellvm link name, or "" for any other.
func tagOfLink(name string) string {
	if len(name) != len(linkPrefix)+8 || name[:len(linkPrefix)] != linkPrefix || !isTag(name[len(linkPrefix):]) {
		return ""
	}
	return name[len(linkPrefix):]
}

func isTag(s string) bool {
	if len(s) != 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// linkAddrs are a VM's link addresses, which the rules refer to.
type linkAddrs struct {
	Gateway netip.Addr   // host side of the /30, where the resolver listens
	Guest   netip.Addr   // guest side of the /30
	Pool    netip.Prefix // all sandboxes' links
}

// rule is one iptables rule: table, chain and the spec after -A chain.
type rule struct {
	Table string
	Chain string
	Spec  []string
}

// policyRules is the content of a policy chain: what the guest may reach
// through the host. The order is the policy:
//
//  1. packets of connections already accepted pass (a policy change
//     deletes the conntrack entries of the connections it revokes, so
//     they do not: see cutFlows);
//  2. a source other than the guest's address is dropped (in the reject
//     chain);
//  3. the steps (policySteps): the pool refused, then entries and denied
//     ranges, most specific first;
//  4. addresses DNS handed out (pins chain);
//  5. everything else is refused.
func policyRules(n objectNames, gen int, l linkAddrs, steps []step) []rule {
	c := n.policy[gen]
	out := []rule{
		{"filter", c, []string{"-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"}},
		{"filter", c, []string{"!", "-s", hostPrefix(l.Guest), "-j", n.reject}},
	}
	for _, s := range steps {
		if s.accept {
			out = append(out, allowRules(c, n.accept, s.dst.String(), s.port)...)
		} else {
			out = append(out, rule{"filter", c, []string{"-d", s.dst.String(), "-j", n.reject}})
		}
	}
	return append(out,
		rule{"filter", c, []string{"-j", n.pins}},
		rule{"filter", c, []string{"-j", n.reject}},
	)
}

// allowRules accepts dst on port (TCP and UDP), or on everything.
func allowRules(chain, accept, dst string, port uint16) []rule {
	if port == 0 {
		return []rule{{"filter", chain, []string{"-d", dst, "-j", accept}}}
	}
	p := strconv.Itoa(int(port))
	return []rule{
		{"filter", chain, []string{"-d", dst, "-p", "tcp", "--dport", p, "-j", accept}},
		{"filter", chain, []string{"-d", dst, "-p", "udp", "--dport", p, "-j", accept}},
	}
}

// datestopLayout is xt_time's --datestop format (UTC).
const datestopLayout = "2006-01-02T15:04:05"

// pinRules accept an address DNS handed out, on ports (nil: all), until
// stop: the kernel stops matching them then (xt_time), so that a pin
// expires even while no daemon runs. label, if not empty, goes into a
// comment: the names that resolved to the address, for a daemon that
// adopts the rules (see adoptPins).
func pinRules(n objectNames, a netip.Addr, ports []uint16, stop time.Time, label string) []rule {
	tail := []string{"-m", "time", "--datestop", stop.UTC().Format(datestopLayout)}
	if label != "" {
		tail = append(tail, "-m", "comment", "--comment", label)
	}
	tail = append(tail, "-j", n.accept)
	dst := []string{"-d", hostPrefix(a)}
	if len(ports) == 0 {
		return []rule{{"filter", n.pins, slices.Concat(dst, tail)}}
	}
	var out []rule
	for _, p := range ports {
		for _, proto := range []string{"tcp", "udp"} {
			out = append(out, rule{"filter", n.pins, slices.Concat(dst, []string{"-p", proto, "--dport", strconv.Itoa(int(p))}, tail)})
		}
	}
	return out
}

// acceptRules is the content of the accept chain. Every allowed new
// connection passes its one rule, so its counter is the allowed count and
// survives policy swaps and pin churn.
func acceptRules(n objectNames) []rule {
	return []rule{{"filter", n.accept, []string{"-j", "ACCEPT"}}}
}

// rejectRules is the content of the reject chain: every refused packet
// passes here, so its counters are the dropped count. Spoofed sources are
// dropped silently (a reject would go to whoever owns that address);
// TCP gets a reset and the rest a port-unreachable, so the guest fails at
// once instead of waiting for a timeout.
func rejectRules(n objectNames, l linkAddrs) []rule {
	return []rule{
		{"filter", n.reject, []string{"!", "-s", hostPrefix(l.Guest), "-j", "DROP"}},
		{"filter", n.reject, []string{"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"}},
		{"filter", n.reject, []string{"-j", "REJECT", "--reject-with", "icmp-port-unreachable"}},
	}
}

// jumpRule sends the guest's forwarded packets to policy chain gen.
func jumpRule(n objectNames, gen int) rule {
	return rule{"filter", fwdChain, []string{"-i", n.link, "-j", n.policy[gen]}}
}

// baseRules are a VM's rules in the host-wide chains, except the jump to
// its policy chain (jumpRule). Into the guest only replies pass: the rest
// falls through to the catch-all "-o cvm+ -j DROP" at the end of the
// chain. (A per-VM drop here would be wrong: the VMs' rules interleave at
// the top of the chain, and another VM's packets to this one must reach
// that VM's policy chain, which refuses them with a reset.) From the
// guest the host itself answers DNS on the gateway and nothing else. The
// guest's address is masqueraded to the uplink (any interface when uplink
// is empty).
//
// Before all of it, in raw PREROUTING (ahead of conntrack, the resolver
// and every filter chain), a packet from the link whose source is not the
// guest's address is dropped: a guest cannot speak, to the host or
// through it, in another sandbox's or a LAN host's name.
func baseRules(n objectNames, l linkAddrs, uplink string) []rule {
	gw := hostPrefix(l.Gateway)
	nat := []string{"-s", hostPrefix(l.Guest)}
	if uplink != "" {
		nat = append(nat, "-o", uplink)
	} else {
		nat = append(nat, "!", "-o", n.link)
	}
	// The comment names the link so that Sweep finds a rule that
	// otherwise names only addresses.
	nat = append(nat, "-m", "comment", "--comment", n.link, "-j", "MASQUERADE")
	return []rule{
		{"raw", preChain, []string{"-i", n.link, "!", "-s", hostPrefix(l.Guest), "-j", "DROP"}},
		{"filter", fwdChain, []string{"-o", n.link, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"}},
		{"filter", inChain, []string{"-i", n.link, "-d", gw, "-p", "udp", "--dport", "53", "-j", "ACCEPT"}},
		{"filter", inChain, []string{"-i", n.link, "-d", gw, "-p", "tcp", "--dport", "53", "-j", "ACCEPT"}},
		{"filter", inChain, []string{"-i", n.link, "-j", n.reject}},
		{"nat", postChain, nat},
	}
}

// hostJumps are the jumps from the built-in chains to the host-wide ones,
// at the top of each.
func hostJumps() []rule {
	out := make([]rule, 0, len(baseChains))
	for _, c := range baseChains {
		out = append(out, rule{c.table, c.from, []string{"-j", c.chain}})
	}
	return out
}

// catchAllRules end the host-wide chains: anything on a cellvm link that
// no VM's rules took (a VM half set up or half torn down, a link whose
// rules a crash lost) is dropped. Fail closed.
var catchAllRules = []rule{
	{"filter", fwdChain, []string{"-i", linkPrefix + "+", "-j", "DROP"}},
	{"filter", fwdChain, []string{"-o", linkPrefix + "+", "-j", "DROP"}},
	{"filter", inChain, []string{"-i", linkPrefix + "+", "-j", "DROP"}},
}

// deniedAddr reports whether a DNS answer of a may not be pinned: not
// IPv4, another sandbox's, or in one of the ranges of sets (the denied
// special ranges, the operator's closed ones).
func deniedAddr(a netip.Addr, pool netip.Prefix, sets ...[]netip.Prefix) bool {
	a = a.Unmap()
	if !a.Is4() || pool.Contains(a) {
		return true
	}
	for _, set := range sets {
		for _, d := range set {
			if d.Contains(a) {
				return true
			}
		}
	}
	return false
}

func hostPrefix(a netip.Addr) string {
	return netip.PrefixFrom(a, a.BitLen()).String()
}
