package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// The operator's egress rules. A tenant writes its own allowlist; the
// operator decides which ranges no tenant may name at all (the cloud's
// metadata, the host, its networks, the private ranges) and which of
// those it opens again, for everyone or for one tenant. Guard.Check
// refuses an allowlist that names a denied range before anything is made;
// package netpolicy keeps the same ranges shut under a broad entry and
// against DNS answers (HostConfig.Egress), so a rule that slipped past the
// check still holds in the kernel.

// ErrDenied is wrapped by (is) every *DeniedError.
var ErrDenied = errors.New("denied by the operator's egress rules")

// DeniedError is Check's refusal of one entry.
type DeniedError struct {
	// Index and Entry are the entry's place in network.allow and its text
	// (clipped).
	Index int
	Entry string
	// Range is the operator's denied range the entry names or lies in.
	Range netip.Prefix
	// Metadata: the entry covers a cloud metadata address, which no
	// AllowPrivate opens.
	Metadata bool
}

func (e *DeniedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "network.allow[%d] %q ", e.Index, e.Entry)
	if p, ok := entryPrefix(e.Entry); ok && p == e.Range {
		b.WriteString("names")
	} else {
		b.WriteString("lies in")
	}
	fmt.Fprintf(&b, " the operator's denied range %v (serve --egress-deny)", e.Range)
	if e.Metadata {
		b.WriteString(": a cloud metadata address, which no rule opens")
	} else {
		b.WriteString(": remove the entry, or ask the operator to open the range (--egress-allow-private)")
	}
	return b.String()
}

// Is makes errors.Is(err, ErrDenied) true.
func (e *DeniedError) Is(target error) bool { return target == ErrDenied }

// Guard is the operator's rules over the allowlists tenants write. The
// zero Guard denies nothing; NewGuard's always denies AlwaysDenied.
type Guard struct {
	// Deny are the ranges no entry may name or lie in (cellvm serve
	// --egress-deny). An entry that holds a denied range strictly
	// (0.0.0.0/0, 8.0.0.0/5) is allowed: enforcement keeps the denied
	// range inside it shut.
	Deny []netip.Prefix
	// AllowPrivate are the parts of Deny that are open again (--egress-
	// allow-private, and a tenant's own). They never open a cloud metadata
	// address.
	AllowPrivate []netip.Prefix
}

// NewGuard returns the rules deny (plus AlwaysDenied, whatever deny says)
// and allowPrivate, in canonical form.
func NewGuard(deny, allowPrivate []netip.Prefix) Guard {
	return Guard{Deny: normalize(AlwaysDenied(), deny), AllowPrivate: normalize(allowPrivate)}
}

// WithAllowPrivate returns g with extra opened too: a tenant's own
// egress_allow_private on top of the operator's.
func (g Guard) WithAllowPrivate(extra ...netip.Prefix) Guard {
	if len(extra) == 0 {
		return g
	}
	return Guard{Deny: normalize(g.Deny), AllowPrivate: normalize(g.AllowPrivate, extra)}
}

// opened is AllowPrivate less the metadata addresses.
func (g Guard) opened() []netip.Prefix {
	return Without(normalize(g.AllowPrivate), metadata())
}

// Closed returns what stays shut to every sandbox these rules cover: Deny
// less AllowPrivate, the metadata addresses always. It is what package
// netpolicy enforces and what the daemon logs.
func (g Guard) Closed() []netip.Prefix {
	return normalize(Without(normalize(g.Deny), g.opened()))
}

// Check refuses an allowlist with an IP or CIDR entry (with or without a
// port) that names a denied range or lies in one, unless AllowPrivate
// opens all of it. The error is a *DeniedError naming the entry and the
// widest denied range that holds it; it wraps ErrDenied. An entry that
// strictly holds a denied range passes, as do DNS names: netpolicy keeps
// denied ranges shut under broad entries and removes DNS answers in them.
// Entries that are not addresses are left to Parse, which a caller runs
// too (sandbox.NetworkPolicy.Validate); Check never panics on any input.
func (g Guard) Check(allow []string) error {
	if len(allow) > MaxEntries {
		return fmt.Errorf("%w: %d entries, at most %d", ErrInvalidPolicy, len(allow), MaxEntries)
	}
	if len(g.Deny) == 0 {
		return nil
	}
	deny := normalize(g.Deny)
	var open []netip.Prefix
	openDone := false
	for i, e := range allow {
		p, ok := entryPrefix(e)
		if !ok {
			continue
		}
		var hit netip.Prefix
		for _, d := range deny {
			if within(p, d) && (!hit.IsValid() || d.Bits() < hit.Bits()) {
				hit = d
			}
		}
		if !hit.IsValid() {
			continue
		}
		if !openDone {
			open, openDone = g.opened(), true
		}
		if covered(p, open) {
			continue
		}
		meta := false
		for _, m := range metadata() {
			meta = meta || p.Overlaps(m)
		}
		return &DeniedError{Index: i, Entry: clip(e, 64), Range: hit, Metadata: meta}
	}
	return nil
}

// entryPrefix reads an allowlist entry as the prefix it names: an address
// (a /32 or /128) or a CIDR prefix, with or without ":port" or brackets;
// false for a DNS name or anything else.
func entryPrefix(e string) (netip.Prefix, bool) {
	if len(e) > MaxEntryBytes+8 {
		return netip.Prefix{}, false
	}
	host := e
	for range 2 {
		h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if strings.Contains(h, "/") {
			if p, err := netip.ParsePrefix(h); err == nil {
				return canonical(p)
			}
		} else if a, err := netip.ParseAddr(h); err == nil {
			a = a.WithZone("")
			return canonical(netip.PrefixFrom(a, a.BitLen()))
		}
		i := strings.LastIndexByte(host, ':')
		if i < 0 {
			break
		}
		host = host[:i]
	}
	return netip.Prefix{}, false
}

// metadata are the clouds' metadata and wire-server addresses: the
// special ranges that are single IPv4 addresses, and AWS's IPv6 one.
func metadata() []netip.Prefix {
	out := []netip.Prefix{netip.MustParsePrefix("fd00:ec2::254/128")}
	for _, s := range SpecialRanges {
		if s.Prefix.Bits() == 32 && !s.Never {
			out = append(out, s.Prefix)
		}
	}
	return out
}

// AlwaysDenied are in every operator's deny list (NewGuard), whatever
// --egress-deny says, so that no operator drops them by accident:
// link-local space and the clouds' metadata and wire-server addresses
// (169.254.169.254, 169.254.170.2, 168.63.129.16, 192.0.0.192,
// 100.100.100.200, fd00:ec2::254).
func AlwaysDenied() []netip.Prefix {
	return normalize([]netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
	}, metadata())
}

// DefaultDeny is the deny list of an operator who names none: what
// AlwaysDenied holds, loopback, the private ranges (RFC 1918, IPv6
// unique local), carrier-grade NAT space, the host's own addresses and
// the networks it is attached to (its uplink's, found at start).
func DefaultDeny(hostAddrs []netip.Addr, hostNets []netip.Prefix) []netip.Prefix {
	var fixed []netip.Prefix
	for _, s := range []string{
		"127.0.0.0/8", "::1/128", // loopback
		"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", // RFC 1918
		"fc00::/7",      // IPv6 unique local (RFC 4193)
		"100.64.0.0/10", // shared address space, carrier-grade NAT (RFC 6598)
	} {
		fixed = append(fixed, netip.MustParsePrefix(s))
	}
	var own []netip.Prefix
	for _, a := range hostAddrs {
		if a.IsValid() {
			a = a.WithZone("")
			own = append(own, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return normalize(AlwaysDenied(), fixed, own, hostNets)
}
