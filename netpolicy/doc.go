// Package netpolicy gives a sandbox's VM its network, and only the network
// its policy allows.
//
// A sandbox with no policy gets no network device at all; that is the
// default because the cheapest firewall is a missing NIC. A sandbox with a
// policy gets:
//
//   - a persistent TAP "cvm-<tag>" (tag: see Tag), opened later by the VMM
//     process, carrying a private /30 taken from a host-wide pool; the /30
//     is only the link, the guest can reach neither the pool nor any
//     private range through it;
//   - NAT (MASQUERADE) of the guest's address towards the uplink;
//   - iptables chains "CELLVM-<tag>-*" that accept only the listed
//     destinations and ports and reject everything else with a TCP reset
//     or an ICMP port-unreachable, so a refused connection fails at once
//     instead of timing out;
//   - a DNS resolver (package dnsproxy) on the link's gateway address that
//     answers only listed names and pins exactly the addresses it hands
//     out, for their (clamped) TTL, as per-address rules.
//
// The special-purpose ranges (specialRanges: IANA's IPv4 special-purpose
// ranges that are not globally reachable, multicast, and the clouds'
// metadata and wire-server addresses 169.254.169.254, 169.254.170.2,
// 168.63.129.16, 192.0.0.192 and 100.100.100.200) are denied under any
// entry, however broad: 0.0.0.0/0 opens none of them. An entry opens one
// only by naming an address or a prefix inside it (198.18.0.0/15 opens
// the benchmarking range; 169.254.0.0/16 opens link-local but not
// 169.254.169.254, which only "169.254.169.254" opens). DNS cannot open
// them: an answer pointing into one is removed before the guest sees it.
// The host's own addresses and other sandboxes are never reachable, not
// even when named. The documentation ranges (192.0.2.0/24, 198.51.100.0/24,
// 203.0.113.0/24) are denied like the rest; a host whose network really
// uses one declares it public (HostConfig.PublicRanges).
//
// Above all of that sit the operator's rules (HostConfig.Egress: cellvm
// serve --egress-deny, by default link-local and metadata, loopback, the
// private ranges, CGNAT, the host's addresses and networks): what they
// close no entry opens, however specific, and no DNS answer into it
// reaches the guest. The API refuses an entry naming such a range before
// a sandbox is made (egress.Guard.Check); the rules here hold even for a
// policy that got past it (one a restarted daemon adopts, say). The parts
// the operator opens again (--egress-allow-private, or a tenant's own
// through WithAllowPrivate) go back to the rules above: a private range
// among them opens only to an entry naming it. A metadata address is
// never opened that way.
//
// IPv6 has no path at all: no policy entry can name an IPv6 destination,
// the links have IPv6 disabled and ip6tables drops IPv6 on them. A host
// whose kernel speaks IPv6 but whose ip6tables fails does not start.
//
// Rules are enforced from the first packet: a packet from a sandbox's link
// whose source is not the guest's address is dropped in raw PREROUTING,
// before anything else sees it. A policy change, or an address DNS opened
// expiring, cuts the guest's open connections the new rules refuse
// (their conntrack entries are deleted), so revocation is not only for
// new connections.
//
// Everything hangs off one jump at the top of each of the host's built-in
// chains; another firewall manager that restarts may put its rules above
// it, so the jumps are checked at start, after every rule change and on a
// timer, and put back on top (hold.go).
//
// Every kernel object carries the cellvm prefix and the sandbox's tag, so
// that a daemon starting after a crash can find and remove what dead
// sandboxes left behind (Host.Sweep).
//
// The rules are generated as plain data (see rules.go) and applied with
// go-iptables, so what the kernel gets is unit-tested without a kernel;
// the namespace tests then show that the kernel does what the rules say.
package netpolicy
