package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cellvm/cellvm/sandbox/egress"
)

// metadataAddrs are the cloud metadata and wire-server addresses: no
// public range may cover them.
func metadataAddrs() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range egress.SpecialRanges {
		if s.Prefix.Bits() == 32 && !s.Never {
			out = append(out, s.Prefix)
		}
	}
	return out
}

// deniedSet is the special ranges less the public ones, as prefixes.
func deniedSet(public []netip.Prefix) []netip.Prefix {
	special := make([]netip.Prefix, len(egress.SpecialRanges))
	for i, s := range egress.SpecialRanges {
		special[i] = s.Prefix
	}
	return egress.Without(special, public)
}

// barredV4 is the IPv4 part of what the operator's rules keep closed:
// no sandbox has an IPv6 path to close.
func barredV4(g egress.Guard) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range g.Closed() {
		if p.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out
}

// checkPublic checks the ranges a host declares public: each must lie in
// a special range a policy may name (a public range of the internet needs
// no declaring; this host, multicast and broadcast cannot be public),
// cover no metadata address and stay clear of the pool.
func checkPublic(public []netip.Prefix, pool netip.Prefix) error {
	for _, p := range public {
		if !p.IsValid() || !p.Addr().Is4() || p != p.Masked() {
			return fmt.Errorf("public range %v: want an IPv4 prefix with its host bits zero", p)
		}
		if s, ok := egress.NeverDestination(p); ok {
			return fmt.Errorf("public range %v: inside %v (%s), which is never a destination", p, s.Prefix, s.What)
		}
		inside := false
		for _, s := range egress.SpecialRanges {
			inside = inside || within(p, s.Prefix)
		}
		if !inside {
			return fmt.Errorf("public range %v: not inside a denied range; it is public already", p)
		}
		for _, m := range metadataAddrs() {
			if p.Overlaps(m) {
				return fmt.Errorf("public range %v covers the metadata address %v, which stays denied", p, m.Addr())
			}
		}
		if p.Overlaps(pool) {
			return fmt.Errorf("public range %v overlaps the sandboxes' pool %v", p, pool)
		}
	}
	return nil
}

// within reports whether p lies inside r.
func within(p, r netip.Prefix) bool {
	return r.Bits() <= p.Bits() && r.Contains(p.Addr())
}

// errNotPrivatePool is NewHost's complaint about a pool outside the
// private ranges.
var errNotPrivatePool = errors.New("want a prefix inside a private range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or 100.64.0.0/10)")

// privatePool reports whether pool lies in a private or shared range,
// where no real destination of a guest's can be.
func privatePool(pool netip.Prefix) bool {
	for _, r := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10"} {
		if within(pool, netip.MustParsePrefix(r)) {
			return true
		}
	}
	return false
}
