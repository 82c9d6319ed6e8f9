package netpolicy

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress/dnsname"
)

// Pins across a daemon restart. A pin's rules carry its expiry (xt_time
// --datestop) and its names (a comment), so the kernel closes it on time
// while no daemon runs, and a daemon that takes a running VM back reads
// them (readPins) and keeps those not yet expired whose names the policy
// it applies still allows (adoptPins). The rest are gone with the old
// rules. While the daemon is down pins can only close, never open.

// leftPin is a pin read back from a pins chain an earlier daemon left.
type leftPin struct {
	stop  time.Time
	names []string
}

// readPins reads the pins chain of n as an earlier daemon left it.
func (h *Host) readPins(n objectNames) (map[netip.Addr]*leftPin, error) {
	var lines []string
	err := h.ns.do(func() error {
		ok, err := h.ipt.ChainExists("filter", n.pins)
		if err != nil || !ok {
			return err
		}
		lines, err = h.ipt.List("filter", n.pins)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]*leftPin{}
	for _, l := range lines {
		ip, stop, names, ok := parsePinRule(l, n.pins)
		if !ok {
			continue
		}
		p := out[ip]
		if p == nil {
			p = &leftPin{stop: stop}
			out[ip] = p
		}
		if stop.Before(p.stop) {
			p.stop = stop // rules of one pin disagree: the earlier wins
		}
		for _, name := range names {
			if !slices.Contains(p.names, name) {
				p.names = append(p.names, name)
			}
		}
	}
	return out, nil
}

// parsePinRule reads one listed rule of a pins chain ("-A CHAIN -d
// 203.0.113.50/32 [-p tcp -m tcp --dport 443] -m time --datestop
// 2026-12-01T10:00:05 -m comment --comment a.test,b.test -j ..."). A rule
// without a stop, or with anything unexpected, is not a pin.
func parsePinRule(line, chain string) (netip.Addr, time.Time, []string, bool) {
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "-A" || f[1] != chain {
		return netip.Addr{}, time.Time{}, nil, false
	}
	var ip netip.Addr
	var stop time.Time
	var names []string
	for i := 2; i+1 < len(f); i++ {
		v := strings.Trim(f[i+1], `"`)
		switch f[i] {
		case "-d":
			p, err := netip.ParsePrefix(v)
			if err != nil || !p.IsSingleIP() || !p.Addr().Is4() {
				return netip.Addr{}, time.Time{}, nil, false
			}
			ip = p.Addr()
		case "--datestop":
			t, err := time.Parse(datestopLayout, v)
			if err != nil {
				return netip.Addr{}, time.Time{}, nil, false
			}
			stop = t
		case "--comment":
			for _, n := range strings.Split(v, ",") {
				if h, ok := dnsname.Host(n); ok && h == n {
					names = append(names, n)
				}
			}
		case "--dport":
			if _, err := strconv.ParseUint(v, 10, 16); err != nil {
				return netip.Addr{}, time.Time{}, nil, false
			}
		default:
			continue
		}
		i++
	}
	if !ip.IsValid() || stop.IsZero() {
		return netip.Addr{}, time.Time{}, nil, false
	}
	return ip, stop, names, true
}

// adoptPins opens again the pins an earlier daemon left that have not
// expired, for the names the policy in force still allows, on the ports
// it allows them now, until their old stop: never longer. It returns how
// many it kept and how many it dropped.
func (a *Attachment) adoptPins(left map[netip.Addr]*leftPin, now time.Time) (kept, dropped int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	pol := a.policy.Load()
	for ip, lp := range left {
		names := map[string]bool{}
		for _, n := range lp.names {
			if _, ok := pol.NamePorts(n); ok && len(names) < maxNamesPerPin {
				names[n] = true
			}
		}
		ports, ok := pinPorts(pol, names)
		if !ok || !lp.stop.After(now) || deniedAddr(ip, a.addrs.Pool, a.h.denied, a.barred) || len(a.pins) >= a.h.cfg.MaxPins {
			dropped++
			continue
		}
		p := &pin{names: names, expires: lp.stop}
		if err := a.setPinRules(ip, p, ports, lp.stop); err != nil {
			a.h.log.Warn("reopening a DNS address after a restart", "sandbox", a.SandboxID, "addr", ip, "err", err)
			dropped++
			continue
		}
		a.pins[ip] = p
		kept++
	}
	return kept, dropped
}
