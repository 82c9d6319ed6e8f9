package egress

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Sets of prefixes, in either family. The operator's rules are lists of
// prefixes that overlap, and what stays closed is one list less another:
// these are the few set operations that takes. No I/O.

// MaxRanges bounds an operator's list (ParseRanges), so that the set
// operations of a check stay small.
const MaxRanges = 4096

// ParseRanges parses an operator's list of ranges: CIDR prefixes with
// their host bits zero, or single addresses (a /32 or /128), IPv4 or IPv6.
// An IPv4-mapped IPv6 form is read as the IPv4 range it maps. It is for
// serve's --egress-deny and --egress-allow-private and for a tenant's
// egress_allow_private in a config file; errors name the item.
func ParseRanges(list []string) ([]netip.Prefix, error) {
	if len(list) > MaxRanges {
		return nil, fmt.Errorf("%d ranges, at most %d", len(list), MaxRanges)
	}
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := parseRange(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("range %q: %v", clip(s, 64), err)
		}
		out = append(out, p)
	}
	return out, nil
}

func parseRange(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, errors.New("empty")
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, errors.New("want a CIDR prefix such as 10.0.0.0/8 or an address")
		}
		p, _ := canonical(netip.PrefixFrom(a, a.BitLen()))
		return p, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, errors.New("want a CIDR prefix such as 10.0.0.0/8 or an address")
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("host bits set (did you mean %v?)", p.Masked())
	}
	p, _ = canonical(p)
	return p, nil
}

// canonical is p without a zone, its host bits zero, and an IPv4-mapped
// IPv6 prefix (::ffff:a.b.c.d/96+n) as the IPv4 prefix it maps, so that
// prefixes of one range compare equal.
func canonical(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	a, bits := p.Addr().WithZone(""), p.Bits()
	if a.Is4In6() && bits >= 96 {
		a, bits = a.Unmap(), bits-96
	}
	return netip.PrefixFrom(a, bits).Masked(), true
}

// normalize returns the valid prefixes of lists in canonical form, sorted
// (IPv4 first), with those inside another left out: the same set, each
// address in exactly one prefix.
func normalize(lists ...[]netip.Prefix) []netip.Prefix {
	var all []netip.Prefix
	for _, l := range lists {
		for _, p := range l {
			if c, ok := canonical(p); ok {
				all = append(all, c)
			}
		}
	}
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	// Sorted so, a prefix comes right after the one that holds it, or
	// after others that prefix holds too.
	out := all[:0]
	for _, p := range all {
		if n := len(out); n > 0 && within(p, out[n-1]) {
			continue
		}
		out = append(out, p)
	}
	return slices.Clip(out)
}

// Without returns set less the addresses of remove, as prefixes, both
// families (netpolicy takes public ranges out of the special ones with
// it). It expects canonical prefixes (host bits zero, as ParseRanges and
// Parse give them).
func Without(set, remove []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range set {
		rest := []netip.Prefix{s}
		for _, r := range remove {
			var next []netip.Prefix
			for _, x := range rest {
				next = append(next, subtract(x, r)...)
			}
			rest = next
		}
		out = append(out, rest...)
	}
	return out
}

// subtract returns r less p, as prefixes: none, r itself, or the halves
// down to p, at most one per bit between them.
func subtract(r, p netip.Prefix) []netip.Prefix {
	if !r.Overlaps(p) {
		return []netip.Prefix{r}
	}
	if within(r, p) {
		return nil
	}
	// p lies inside r: split r in halves, keep the one without p whole.
	lo, hi := halves(r)
	if within(p, lo) {
		return append(subtract(lo, p), hi)
	}
	return append([]netip.Prefix{lo}, subtract(hi, p)...)
}

// halves splits a prefix shorter than its address in two.
func halves(r netip.Prefix) (netip.Prefix, netip.Prefix) {
	k := r.Bits() // the bit that tells the halves apart, from the left
	var hi netip.Addr
	if r.Addr().Is4() {
		b := r.Addr().As4()
		b[k/8] |= 0x80 >> (k % 8)
		hi = netip.AddrFrom4(b)
	} else {
		b := r.Addr().As16()
		b[k/8] |= 0x80 >> (k % 8)
		hi = netip.AddrFrom16(b)
	}
	return netip.PrefixFrom(r.Addr(), k+1), netip.PrefixFrom(hi, k+1)
}

// covered reports whether every address of p lies in set.
func covered(p netip.Prefix, set []netip.Prefix) bool {
	for _, s := range set {
		if within(p, s) {
			return true
		}
	}
	return len(Without([]netip.Prefix{p}, set)) == 0
}
