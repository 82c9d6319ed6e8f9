package netpolicy

import (
	"net/netip"
	"slices"

	"github.com/cellvm/cellvm/sandbox/egress"
)

// A policy chain is a list of steps: the first step whose destination
// (and port) matches a new connection decides it. The same list makes the
// iptables rules (policyRules) and answers, in Go, whether a flow is
// allowed (decide), so that the connections a policy change revokes are
// exactly those the new rules would refuse.

// IP protocol numbers the steps tell apart.
const (
	protoTCP = 6
	protoUDP = 17
)

// step is one decision of a policy chain.
type step struct {
	dst netip.Prefix
	// port, if not zero, limits the step to that TCP and UDP port; zero
	// is every protocol and port.
	port   uint16
	accept bool
}

func (s step) matches(dst netip.Addr, proto uint8, port uint16) bool {
	if !s.dst.Contains(dst) {
		return false
	}
	return s.port == 0 || (proto == protoTCP || proto == protoUDP) && port == s.port
}

// policySteps orders a policy against the closed and denied ranges:
//
//  1. other sandboxes (the pool) are refused, whatever is listed;
//  2. so are the ranges the operator's rules keep closed (barred: see
//     HostConfig.Egress), however specific the entry naming them;
//  3. then the entries and the denied ranges, most specific prefix first,
//     and an entry before a denied range of the same prefix: so an entry
//     inside a denied range (10.1.2.3, or 198.18.0.0/15 itself) opens
//     that much of it, and a broad entry (0.0.0.0/0) opens none of the
//     denied ranges inside it.
//
// What no step decides goes on to the addresses DNS handed out (pins),
// then is refused.
func policySteps(l linkAddrs, barred, denied []netip.Prefix, p egress.Policy) []step {
	rest := make([]step, 0, len(p.Nets)+len(denied))
	for _, r := range p.Nets {
		rest = append(rest, step{dst: r.Prefix, port: r.Port, accept: true})
	}
	for _, d := range denied {
		rest = append(rest, step{dst: d})
	}
	slices.SortStableFunc(rest, func(a, b step) int {
		if a.dst.Bits() != b.dst.Bits() {
			return b.dst.Bits() - a.dst.Bits()
		}
		switch {
		case a.accept && !b.accept:
			return -1
		case b.accept && !a.accept:
			return 1
		}
		return 0
	})
	first := make([]step, 0, 1+len(barred)+len(rest))
	first = append(first, step{dst: l.Pool})
	for _, c := range barred {
		first = append(first, step{dst: c})
	}
	return append(first, rest...)
}

// decide is the policy chain's verdict on a new connection to dst: the
// first matching step's, else whether a pin opens it.
func decide(steps []step, pins map[netip.Addr]*pin, dst netip.Addr, proto uint8, port uint16) bool {
	for _, s := range steps {
		if s.matches(dst, proto, port) {
			return s.accept
		}
	}
	p := pins[dst]
	if p == nil || !p.applied {
		return false
	}
	if len(p.ports) == 0 {
		return true
	}
	return (proto == protoTCP || proto == protoUDP) && slices.Contains(p.ports, port)
}

// opens reports whether the steps let any connection to a through before
// the pins: the first step whose prefix holds a, whatever its port, is an
// accept. DNS answers a policy opens this way reach the guest even inside
// a denied range.
func opens(steps []step, a netip.Addr) bool {
	for _, s := range steps {
		if s.dst.Contains(a) {
			return s.accept
		}
	}
	return false
}
