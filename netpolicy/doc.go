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
// Private ranges, link-local (169.254.169.254 included), the host's own
// addresses and other sandboxes are never reachable unless an entry names
// an address or prefix inside the private range; the host's addresses and
// other sandboxes not even then. DNS cannot open them either: an answer
// pointing into a private range is removed before the guest sees it.
//
// Every kernel object carries the cellvm prefix and the sandbox's tag, so
// that a daemon starting after a crash can find and remove what dead
// sandboxes left behind (Host.Sweep).
//
// The rules are generated as plain data (see rules.go) and applied with
// go-iptables, so what the kernel gets is unit-tested without a kernel;
// the namespace tests then show that the kernel does what the rules say.
package netpolicy
