package netpolicy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress"

	"github.com/cellvm/cellvm/sandbox/egress/dnsname"
)

// Addresses opened by DNS ("pins"). The resolver calls admit before the
// guest sees an answer; each address gets rules in the VM's pins chain on
// the ports its names allow, and loses them when the clamped TTL (plus
// grace) has passed or the policy no longer allows any of its names.

// pin is an address DNS handed out, open until expires.
type pin struct {
	names   map[string]bool // names that resolved to it
	expires time.Time
	// What its rules in the pins chain say, once applied: the ports they
	// open (nil: all), when the kernel stops them, the names' label.
	applied bool
	ports   []uint16
	stop    time.Time
	label   string
}

// pinStopGrain rounds up the kernel's expiry of a pin's rules, so that a
// name resolved again and again rewrites them at most once per grain.
// With the daemon gone a pin stays open at most this much past its TTL.
const pinStopGrain = 5 * time.Second

// kernelStop is when a pin's rules stop matching: its expiry, rounded up
// to the grain.
func kernelStop(expires time.Time) time.Time {
	t := expires.Truncate(pinStopGrain)
	if t.Before(expires) {
		t = t.Add(pinStopGrain)
	}
	return t
}

// maxLabel is an iptables comment's limit.
const maxLabel = 255

// pinLabel lists a pin's names in a comment, in order, as many as fit.
// Only host names go in (the resolver hands over no others): they need
// no quoting. A daemon that reads a label back with names missing can
// only open less.
func pinLabel(names map[string]bool) string {
	sorted := make([]string, 0, len(names))
	for n := range names {
		if h, ok := dnsname.Host(n); ok && h == n {
			sorted = append(sorted, n)
		}
	}
	slices.Sort(sorted)
	var b strings.Builder
	for _, n := range sorted {
		if b.Len()+len(n)+1 > maxLabel {
			break
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
	}
	return b.String()
}

// maxNamesPerPin bounds a pin's names (a wildcard can make many names
// share an address).
const maxNamesPerPin = 64

// admit opens the addresses DNS got for an allowed name, before the guest
// sees them, and returns those it may see: never one in a denied range
// unless an address entry lists it (then that entry's rule lets it
// through), never one the operator's rules keep closed (no entry opens
// those), never more than MaxPins open at once.
func (a *Attachment) admit(name string, addrs []netip.Addr, ttl time.Duration) ([]netip.Addr, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	pol := a.policy.Load()
	if _, ok := pol.NamePorts(name); !ok {
		return nil, nil // the policy changed while the query was out
	}
	expires := time.Now().Add(ttl + a.h.cfg.PinGrace)
	var kept []netip.Addr
	var errs []error
	for _, ip := range addrs {
		if deniedAddr(ip, a.addrs.Pool, a.h.denied, a.barred) {
			if opens(a.steps, ip) {
				kept = append(kept, ip)
			} else {
				a.h.log.Warn("DNS answer in a denied range removed", "sandbox", a.SandboxID, "name", name, "addr", ip)
			}
			continue
		}
		p := a.pins[ip]
		if p == nil {
			if len(a.pins) >= a.h.cfg.MaxPins {
				a.h.log.Warn("too many DNS-opened addresses; answer withheld", "sandbox", a.SandboxID, "name", name, "addr", ip)
				continue
			}
			p = &pin{names: map[string]bool{}}
		}
		if !p.names[name] && len(p.names) < maxNamesPerPin {
			p.names[name] = true
		}
		ports, _ := pinPorts(pol, p.names)
		until := p.expires
		if expires.After(until) {
			until = expires
		}
		if err := a.setPinRules(ip, p, ports, kernelStop(until)); err != nil {
			errs = append(errs, err)
			continue
		}
		p.expires = until
		a.pins[ip] = p
		kept = append(kept, ip)
	}
	if len(kept) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return kept, nil
}

// pinPorts is the union of the ports the policy gives names (nil: all),
// and whether any of the names is still allowed.
func pinPorts(pol *egress.Policy, names map[string]bool) ([]uint16, bool) {
	var ports []uint16
	any := false
	for name := range names {
		ps, ok := pol.NamePorts(name)
		if !ok {
			continue
		}
		if ps == nil {
			return nil, true
		}
		any = true
		for _, p := range ps {
			if !slices.Contains(ports, p) {
				ports = append(ports, p)
			}
		}
	}
	return sortPorts(ports), any
}

func sortPorts(p []uint16) []uint16 {
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && p[j] < p[j-1]; j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
	return p
}

// setPinRules makes ip's rules open ports until at least stop: new rules
// first, then the old ones go, so an open address never closes in
// between. The kernel's stop only moves later. a.mu is held.
func (a *Attachment) setPinRules(ip netip.Addr, p *pin, ports []uint16, stop time.Time) error {
	if p.applied && p.stop.After(stop) {
		stop = p.stop
	}
	label := pinLabel(p.names)
	if p.applied && samePorts(p.ports, ports) && p.stop.Equal(stop) && p.label == label {
		return nil
	}
	var b batch
	b.appendRules(pinRules(a.names, ip, ports, stop, label))
	if p.applied {
		b.deleteRules(p.rules(a.names, ip))
	}
	if err := a.h.ns.do(func() error { return a.h.apply(&b) }); err != nil {
		return fmt.Errorf("open %v: %w", ip, err)
	}
	p.applied, p.ports, p.stop, p.label = true, ports, stop, label
	return nil
}

// rules are the pin's rules as applied.
func (p *pin) rules(n objectNames, ip netip.Addr) []rule {
	return pinRules(n, ip, p.ports, p.stop, p.label)
}

func samePorts(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// expireLoop closes addresses whose TTL has passed.
func (a *Attachment) expireLoop() {
	defer close(a.done)
	t := time.NewTicker(a.h.cfg.ExpiryInterval)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			return
		case now := <-t.C:
			a.expire(now)
			a.retryCut()
		}
	}
}

func (a *Attachment) expire(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b batch
	var gone []netip.Addr
	for ip, p := range a.pins {
		if now.Before(p.expires) {
			continue
		}
		b.deleteRules(p.rules(a.names, ip))
		gone = append(gone, ip)
	}
	if len(gone) == 0 {
		return
	}
	if err := a.h.ns.do(func() error { return a.h.apply(&b) }); err != nil {
		a.h.log.Error("closing expired DNS addresses", "sandbox", a.SandboxID, "addrs", gone, "err", err)
		return
	}
	for _, ip := range gone {
		delete(a.pins, ip)
	}
	a.revoke("DNS address expired")
}

// retryCut retries a cut of revoked flows that failed.
func (a *Attachment) retryCut() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cutPending && !a.closed {
		a.revoke("retry")
	}
}
