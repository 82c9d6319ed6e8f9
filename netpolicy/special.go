package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
)

// specialRange is a destination range that is not the public internet: a
// range of IANA's IPv4 Special-Purpose Address Registry whose addresses
// are not globally reachable, multicast, or a cloud's metadata or
// wire-server address (which sits in public or link-local space and hands
// out a machine's credentials to whoever asks from it).
type specialRange struct {
	prefix netip.Prefix
	what   string
	// never: not a destination at all (this host, multicast, reserved,
	// broadcast); no policy entry may name it.
	never bool
}

func special(p, what string, never bool) specialRange {
	return specialRange{prefix: netip.MustParsePrefix(p), what: what, never: never}
}

// specialRanges are denied to every guest, under any entry, however broad
// (0.0.0.0/0 included): an entry opens a range only by naming an address
// or a prefix inside it, and a cloud's metadata address only by naming the
// address itself. DNS cannot open them at all (an answer into them is
// removed before the guest sees it, unless an entry opens the address).
// The documentation ranges are here too: on a host whose network really
// uses one, HostConfig.PublicRanges (cellvm serve --public-ranges) makes it
// public. README's Network policy section lists the same ranges.
var specialRanges = []specialRange{
	// IANA IPv4 Special-Purpose Address Registry, "Globally Reachable:
	// False" (RFC 6890 and its updates).
	special("0.0.0.0/8", `"this network" (RFC 791)`, true),
	special("10.0.0.0/8", "private use (RFC 1918)", false),
	special("100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)", false),
	special("127.0.0.0/8", "loopback (RFC 1122)", true),
	special("169.254.0.0/16", "link local (RFC 3927)", false),
	special("172.16.0.0/12", "private use (RFC 1918)", false),
	// Its two globally reachable anycast addresses (192.0.0.9, 192.0.0.10)
	// are denied with it: nothing a sandbox needs.
	special("192.0.0.0/24", "IETF protocol assignments (RFC 6890)", false),
	special("192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)", false),
	special("192.168.0.0/16", "private use (RFC 1918)", false),
	special("198.18.0.0/15", "benchmarking (RFC 2544)", false),
	special("198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)", false),
	special("203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)", false),
	special("240.0.0.0/4", "reserved (RFC 1112)", true),
	special("255.255.255.255/32", "limited broadcast (RFC 919)", true),
	// Not in the registry, not a unicast destination.
	special("224.0.0.0/4", "multicast (RFC 5771)", true),
	// Cloud metadata and wire servers: each its own range, so that only an
	// entry naming the address opens it (169.254.0.0/16 does not).
	special("169.254.169.254/32", "instance metadata (AWS, GCP, Azure, OpenStack, ...)", false),
	special("169.254.170.2/32", "container credentials (AWS ECS)", false),
	special("168.63.129.16/32", "wire server (Azure)", false),
	special("192.0.0.192/32", "instance metadata (Oracle Cloud)", false),
	special("100.100.100.200/32", "instance metadata (Alibaba Cloud)", false),
}

// metadataAddrs are the cloud metadata and wire-server addresses: no
// public range may cover them.
func metadataAddrs() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range specialRanges {
		if s.prefix.Bits() == 32 && !s.never {
			out = append(out, s.prefix)
		}
	}
	return out
}

// neverDestination returns the never-a-destination range holding pfx, if
// any.
func neverDestination(pfx netip.Prefix) (specialRange, bool) {
	for _, s := range specialRanges {
		if s.never && within(pfx, s.prefix) {
			return s, true
		}
	}
	return specialRange{}, false
}

// deniedSet is the special ranges less the public ones, as prefixes.
func deniedSet(public []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range specialRanges {
		rest := []netip.Prefix{s.prefix}
		for _, p := range public {
			var next []netip.Prefix
			for _, r := range rest {
				next = append(next, subtract(r, p)...)
			}
			rest = next
		}
		out = append(out, rest...)
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
		if s, ok := neverDestination(p); ok {
			return fmt.Errorf("public range %v: inside %v (%s), which is never a destination", p, s.prefix, s.what)
		}
		inside := false
		for _, s := range specialRanges {
			inside = inside || within(p, s.prefix)
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

// subtract returns r less p, as prefixes.
func subtract(r, p netip.Prefix) []netip.Prefix {
	if !r.Overlaps(p) {
		return []netip.Prefix{r}
	}
	if within(r, p) {
		return nil
	}
	// p lies inside r: split r in halves and keep the one without p whole.
	lo, hi := halves(r)
	return append(subtract(lo, p), subtract(hi, p)...)
}

// halves splits an IPv4 prefix (shorter than /32) in two.
func halves(r netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := r.Bits() + 1
	b := r.Addr().As4()
	k := r.Bits() // the bit that tells the halves apart, from the left
	b[k/8] |= 0x80 >> (k % 8)
	return netip.PrefixFrom(r.Addr(), bits), netip.PrefixFrom(netip.AddrFrom4(b), bits)
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
