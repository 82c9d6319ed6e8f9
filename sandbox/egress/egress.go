// Package egress is the language of a sandbox's egress allowlist: what a
// caller may write in network.allow, parsed into rules, the special
// ranges no entry can open by accident, and the operator's rules over
// what a tenant may name at all (Guard, guard.go). It is part of the sandbox
// contract (package sandbox validates with it, so a front end refuses a
// bad entry before any engine sees it) and has no I/O; package netpolicy
// enforces what it parses on the host.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/cellvm/cellvm/sandbox/egress/dnsname"
)

// Limits on a policy. They bound the rules and the work a policy makes the
// host do; they match sandbox.MaxAllowEntries and MaxAllowEntryBytes.
const (
	MaxEntries    = 256
	MaxEntryBytes = 253 + len(":65535")
	maxNameBytes  = 253
	maxLabelBytes = 63
)

// ErrInvalidPolicy is wrapped by every error Parse returns.
var ErrInvalidPolicy = errors.New("invalid network policy")

// NetRule allows a destination prefix, on one port or on all.
type NetRule struct {
	// Prefix is an IPv4 prefix in canonical form (host bits zero); a single
	// address is a /32.
	Prefix netip.Prefix
	// Port, if not zero, limits the rule to that TCP and UDP port.
	Port uint16
}

// NameRule allows the addresses DNS hands out for a name.
type NameRule struct {
	// Name is lower case without a trailing dot. With Wildcard it is the
	// suffix: "*.example.com" is {Name: "example.com", Wildcard: true}
	// and matches any name below example.com, not example.com itself.
	Name     string
	Wildcard bool
	// Port, if not zero, limits the rule to that TCP and UDP port.
	Port uint16
}

// Policy is a parsed egress allowlist. The zero Policy allows nothing.
type Policy struct {
	Nets  []NetRule
	Names []NameRule
	// entries are the entries as given, for display.
	entries []string
}

// Empty reports whether the policy allows nothing. An empty policy at
// creation means the sandbox gets no network device at all.
func (p Policy) Empty() bool { return len(p.Nets) == 0 && len(p.Names) == 0 }

// Entries returns the entries as they were given to Parse.
func (p Policy) Entries() []string { return append([]string(nil), p.entries...) }

// Parse checks and parses an allowlist. Entries are, each optionally
// followed by ":port" (1-65535, TCP and UDP):
//
//	203.0.113.7             an IPv4 address
//	198.51.100.0/24         an IPv4 prefix, host bits zero
//	pypi.org                a DNS name (the addresses DNS hands out for it)
//	*.pythonhosted.org      any name below pythonhosted.org
//
// IPv6 entries are refused: the guest's link is IPv4 only, and an entry
// that silently did nothing would mislead. Errors wrap ErrInvalidPolicy and
// name the entry's index, so they can be shown to the caller as they are.
func Parse(allow []string) (Policy, error) {
	if len(allow) > MaxEntries {
		return Policy{}, fmt.Errorf("%w: %d entries, at most %d", ErrInvalidPolicy, len(allow), MaxEntries)
	}
	var p Policy
	for i, e := range allow {
		if err := p.add(e); err != nil {
			return Policy{}, fmt.Errorf("%w: allow[%d] %q: %v", ErrInvalidPolicy, i, clip(e, 64), err)
		}
		p.entries = append(p.entries, e)
	}
	return p, nil
}

func (p *Policy) add(e string) error {
	if e == "" {
		return errors.New("empty entry")
	}
	if len(e) > MaxEntryBytes {
		return fmt.Errorf("%d bytes, at most %d", len(e), MaxEntryBytes)
	}
	if strings.TrimSpace(e) != e {
		return errors.New("leading or trailing white space")
	}
	host, port, err := splitPort(e)
	if err != nil {
		return err
	}
	if strings.Contains(host, "/") {
		pfx, err := netip.ParsePrefix(host)
		if err != nil {
			return fmt.Errorf("malformed CIDR prefix: %v", err)
		}
		if pfx != pfx.Masked() {
			return fmt.Errorf("host bits set in CIDR prefix (did you mean %v?)", pfx.Masked())
		}
		if err := checkDestination(pfx); err != nil {
			return err
		}
		p.Nets = append(p.Nets, NetRule{Prefix: pfx, Port: port})
		return nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		pfx := netip.PrefixFrom(a, a.BitLen())
		if err := checkDestination(pfx); err != nil {
			return err
		}
		p.Nets = append(p.Nets, NetRule{Prefix: pfx, Port: port})
		return nil
	}
	r, err := parseName(host)
	if err != nil {
		return err
	}
	r.Port = port
	p.Names = append(p.Names, r)
	return nil
}

// splitPort splits "host:port". Entries with more than one colon or a
// bracket are IPv6 and refused here, with or without a port.
func splitPort(e string) (string, uint16, error) {
	if strings.Count(e, ":") > 1 || strings.ContainsAny(e, "[]") {
		return "", 0, errors.New("IPv6 destinations are not supported (the guest link is IPv4 only)")
	}
	host, ps, found := strings.Cut(e, ":")
	if !found {
		return e, 0, nil
	}
	if host == "" {
		return "", 0, errors.New("port without a destination")
	}
	if ps == "" {
		return "", 0, errors.New("empty port after ':'")
	}
	if strings.Trim(ps, "0123456789") != "" {
		return "", 0, fmt.Errorf("port %q is not a number", clip(ps, 16))
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %s out of range 1-65535", clip(ps, 16))
	}
	return host, uint16(n), nil
}

func checkDestination(pfx netip.Prefix) error {
	if !pfx.Addr().Is4() {
		return errors.New("IPv6 destinations are not supported (the guest link is IPv4 only)")
	}
	if s, ok := NeverDestination(pfx); ok {
		return fmt.Errorf("%v is inside %v (%s), which is never a destination", pfx, s.Prefix, s.What)
	}
	return nil
}

func parseName(s string) (NameRule, error) {
	var r NameRule
	if strings.HasPrefix(s, "*") {
		if !strings.HasPrefix(s, "*.") {
			return r, errors.New(`a wildcard must be "*." followed by a name`)
		}
		r.Wildcard = true
		s = s[2:]
		if s == "" || s == "." {
			return r, errors.New("empty wildcard: nothing after \"*.\"")
		}
	}
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" {
		return r, errors.New("empty name")
	}
	if len(s) > maxNameBytes {
		return r, fmt.Errorf("name longer than %d bytes", maxNameBytes)
	}
	if strings.Contains(s, "*") {
		return r, errors.New(`"*" is only allowed as the whole first label`)
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if err := checkLabel(l); err != nil {
			return r, err
		}
	}
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" {
		return r, errors.New("not an IPv4 address, CIDR prefix or DNS name (all-numeric top-level label)")
	}
	if r.Wildcard && len(labels) < 2 {
		return r, fmt.Errorf("wildcard over a whole top-level domain (*.%s) is refused", s)
	}
	r.Name = s
	return r, nil
}

func checkLabel(l string) error {
	if l == "" {
		return errors.New("empty label in name")
	}
	if len(l) > maxLabelBytes {
		return fmt.Errorf("label longer than %d bytes", maxLabelBytes)
	}
	for j := 0; j < len(l); j++ {
		c := l[j]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
		case c == '-' && j > 0 && j < len(l)-1:
		default:
			return fmt.Errorf("character %q not allowed in a DNS name", c)
		}
	}
	return nil
}

// NamePorts reports whether name is allowed, and on which ports: nil with
// ok means every port. name is in presentation format (any case, trailing
// dot or not, escapes as DNS writes them) and is compared with the
// entries label by label: "x\.example.com" (the labels "x.example" and
// "com") is not under "*.example.com".
func (p Policy) NamePorts(name string) (ports []uint16, ok bool) {
	labels, valid := dnsname.Labels(name)
	if !valid || len(labels) == 0 {
		return nil, false
	}
	anyPort := false
	for _, r := range p.Names {
		if !r.matches(labels) {
			continue
		}
		ok = true
		if r.Port == 0 {
			anyPort = true
		} else {
			ports = appendUnique(ports, r.Port)
		}
	}
	if anyPort {
		return nil, ok
	}
	return ports, ok
}

// matches compares a name's labels (lower case, as dnsname.Labels gives
// them) with the rule's: all of them, or for a wildcard the last ones with
// at least one label before them.
func (r NameRule) matches(labels []string) bool {
	want := strings.Split(r.Name, ".")
	if r.Wildcard {
		if len(labels) <= len(want) {
			return false
		}
		labels = labels[len(labels)-len(want):]
	}
	return slices.Equal(labels, want)
}

func appendUnique(s []uint16, v uint16) []uint16 {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// SpecialRange is a destination range that is not the public internet: a
// range of IANA's IPv4 Special-Purpose Address Registry whose addresses
// are not globally reachable, multicast, or a cloud's metadata or
// wire-server address (which sits in public or link-local space and hands
// out a machine's credentials to whoever asks from it).
type SpecialRange struct {
	Prefix netip.Prefix
	What   string
	// Never: not a destination at all (this host, multicast, reserved,
	// broadcast); no policy entry may name it.
	Never bool
}

func special(p, what string, never bool) SpecialRange {
	return SpecialRange{Prefix: netip.MustParsePrefix(p), What: what, Never: never}
}

// SpecialRanges are denied to every guest, under any entry, however broad
// (0.0.0.0/0 included): an entry opens a range only by naming an address
// or a prefix inside it, and a cloud's metadata address only by naming the
// address itself. DNS cannot open them at all (an answer into them is
// removed before the guest sees it, unless an entry opens the address).
// The documentation ranges are here too: on a host whose network really
// uses one, HostConfig.PublicRanges (cellvm serve --public-ranges) makes it
// public. README's Network policy section lists the same ranges.
var SpecialRanges = []SpecialRange{
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

// NeverDestination returns the never-a-destination range holding pfx, if
// any.
func NeverDestination(pfx netip.Prefix) (SpecialRange, bool) {
	for _, s := range SpecialRanges {
		if s.Never && within(pfx, s.Prefix) {
			return s, true
		}
	}
	return SpecialRange{}, false
}

func within(p, r netip.Prefix) bool {
	return r.Bits() <= p.Bits() && r.Contains(p.Addr())
}
