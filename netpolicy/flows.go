package netpolicy

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Revocation. The policy chain lets packets of accepted connections pass
// (conntrack's ESTABLISHED), so a rule taken away stops only new
// connections. To stop the others too, every change that takes something
// away (Update, pin expiry, Attach over a running VM) deletes, after the
// new rules are in place, the conntrack entries of the guest's flows that
// the new rules would refuse. The next packet of such a flow is new to
// conntrack, meets the new rules and is refused: a TCP reset or an ICMP
// port-unreachable to the guest, nothing to the far end.

// revokedFlows matches the conntrack entries of one guest's flows that
// allowed no longer lets through.
type revokedFlows struct {
	guest   netip.Addr
	allowed func(dst netip.Addr, proto uint8, port uint16) bool
}

// MatchConntrackFlow implements netlink.CustomConntrackFilter.
func (f revokedFlows) MatchConntrackFlow(fl *netlink.ConntrackFlow) bool {
	src, ok := netip.AddrFromSlice(fl.Forward.SrcIP)
	if !ok || src.Unmap() != f.guest {
		return false
	}
	dst, ok := netip.AddrFromSlice(fl.Forward.DstIP)
	if !ok {
		return true // not a destination the rules can allow
	}
	return !f.allowed(dst.Unmap(), fl.Forward.Protocol, fl.Forward.DstPort)
}

// flowAllowed is what the rules in force let the guest keep: its own
// resolver, and what the policy chain accepts. a.mu is held.
func (a *Attachment) flowAllowed(dst netip.Addr, proto uint8, port uint16) bool {
	if dst == a.addrs.Gateway {
		return (proto == protoTCP || proto == protoUDP) && port == 53
	}
	return decide(a.steps, a.pins, dst, proto, port)
}

// cutFlows deletes the conntrack entries of the guest's flows the rules
// in force refuse, and returns how many went. a.mu is held.
func (a *Attachment) cutFlows() (uint, error) {
	f := revokedFlows{guest: a.addrs.Guest, allowed: a.flowAllowed}
	var n uint
	err := a.h.ns.do(func() error {
		var err error
		n, err = netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, f)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("cut revoked connections of %s: %w", a.addrs.Guest, err)
	}
	return n, nil
}

// revoke cuts the flows the rules in force refuse, and logs what it did.
// A failure is logged and retried by the expiry loop: the rules are in
// place already, only flows that were open before stay open until then.
// a.mu is held.
func (a *Attachment) revoke(why string) {
	n, err := a.cutFlows()
	if err != nil {
		if !a.cutPending {
			a.h.log.Error("revoked connections stay open until a retry succeeds", "sandbox", a.SandboxID, "why", why, "err", err)
		}
		a.cutPending = true
		return
	}
	if a.cutPending {
		a.h.log.Info("revoked connections cut after a retry", "sandbox", a.SandboxID)
	}
	a.cutPending = false
	if n > 0 {
		a.h.log.Info("revoked connections cut", "sandbox", a.SandboxID, "why", why, "flows", n)
	}
}

// probeConntrack checks that conntrack entries can be listed and deleted
// here (nf_conntrack_netlink): without it revocation would silently not
// cut, so NewHost refuses to start.
func (h *Host) probeConntrack() error {
	none := revokedFlows{guest: netip.IPv4Unspecified(), allowed: func(netip.Addr, uint8, uint16) bool { return true }}
	return h.ns.do(func() error {
		_, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, unix.AF_INET, none)
		return err
	})
}
