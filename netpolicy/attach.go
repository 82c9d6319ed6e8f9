package netpolicy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress"

	"github.com/cellvm/cellvm/netpolicy/dnsproxy"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// ErrClosed is returned by an Attachment's methods after Close.
var ErrClosed = errors.New("netpolicy: attachment closed")

// AttachOption changes how Attach builds the link.
type AttachOption func(*attachOptions)

type attachOptions struct {
	vethNS, vethPeer string
	allowPrivate     []netip.Prefix
}

// WithAllowPrivate opens these parts of the operator's closed ranges
// (HostConfig.Egress) for this sandbox alone, on top of the operator's
// AllowPrivate: a tenant's own egress_allow_private. A metadata address
// stays closed whatever they cover. What they open is then like the rest
// of the special ranges: an entry naming an address or a prefix inside
// it opens it; a broad entry (0.0.0.0/0) does not.
func WithAllowPrivate(ranges ...netip.Prefix) AttachOption {
	return func(o *attachOptions) { o.allowPrivate = append(o.allowPrivate, ranges...) }
}

// WithVethPeer makes the link a veth pair instead of a TAP, its peer named
// peer inside the network namespace at nsPath. It is for tests that stand
// a network namespace in for the guest: a TAP passes no traffic until a
// VMM reads it.
func WithVethPeer(nsPath, peer string) AttachOption {
	return func(o *attachOptions) { o.vethNS, o.vethPeer = nsPath, peer }
}

// Attachment is one VM's network: its link, rules and resolver. Its
// exported fields do not change after Attach.
type Attachment struct {
	SandboxID string
	// TAP is the link's name, for virtio/net.OpenTAP.
	TAP string
	// GuestAddr is the guest's address and prefix, Gateway the host side
	// of the link, DNS the resolver (the gateway).
	GuestAddr netip.Prefix
	Gateway   netip.Addr
	DNS       netip.Addr
	// MAC is the address to give the guest's virtio-net device.
	MAC net.HardwareAddr

	h     *Host
	names objectNames
	addrs linkAddrs
	// barred are the operator's closed ranges (IPv4) for this sandbox:
	// the host's less those WithAllowPrivate opened.
	barred []netip.Prefix
	policy atomic.Pointer[egress.Policy]
	dns    *dnsproxy.Server
	stop   chan struct{}
	done   chan struct{}

	mu         sync.Mutex // the fields below and every change of rules
	gen        int        // policy chain in use
	steps      []step     // the policy chain's steps in force
	pins       map[netip.Addr]*pin
	cutPending bool // revoked flows not cut yet: the expiry loop retries
	closed     bool
	built      bool      // Attach completed: teardown knows what exists
	counted    [2]uint64 // last counters read, returned if a read fails
}

// KernelArgs returns what the guest's kernel command line needs for its
// network: "cellvm.ip=<addr/prefix> cellvm.gw=<ip> cellvm.dns=<ip>".
func (a *Attachment) KernelArgs() string {
	return fmt.Sprintf("cellvm.ip=%v cellvm.gw=%v cellvm.dns=%v", a.GuestAddr, a.Gateway, a.DNS)
}

// Policy returns the policy in force.
func (a *Attachment) Policy() egress.Policy { return *a.policy.Load() }

// Attach gives a sandbox its network: it creates the chains and rules
// first, then the link (so it never passes a packet unfiltered; the base
// chains' catch-all drops cover the moments between), then the resolver.
// A failed Attach leaves nothing behind. If Sweep found this sandbox's
// link alive (the daemon restarted under a running VM), Attach adopts it
// and replaces its rules.
func (h *Host) Attach(ctx context.Context, sandboxID string, p egress.Policy, opts ...AttachOption) (*Attachment, error) {
	var o attachOptions
	for _, f := range opts {
		f(&o)
	}
	if sandboxID == "" {
		return nil, errors.New("netpolicy: empty sandbox id")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := namesFor(Tag(sandboxID))
	h.mu.Lock()
	if _, ok := h.attached[n.tag]; ok {
		h.mu.Unlock()
		return nil, fmt.Errorf("netpolicy: sandbox %s (tag %s) already has a network", sandboxID, n.tag)
	}
	slot, adopt := h.survivors[n.tag]
	if adopt {
		delete(h.survivors, n.tag)
	} else {
		var err error
		if slot, err = h.alloc.allocate(n.tag); err != nil {
			h.mu.Unlock()
			return nil, err
		}
	}
	a := &Attachment{
		SandboxID: sandboxID,
		TAP:       n.link,
		h:         h,
		names:     n,
		addrs:     h.alloc.slotAddrs(slot),
		barred:    h.barred,
		pins:      map[netip.Addr]*pin{},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
	}
	if len(o.allowPrivate) > 0 {
		a.barred = barredV4(h.cfg.Egress.WithAllowPrivate(o.allowPrivate...))
	}
	h.attached[n.tag] = a
	h.mu.Unlock()

	a.GuestAddr = netip.PrefixFrom(a.addrs.Guest, 30)
	a.Gateway = a.addrs.Gateway
	a.DNS = a.addrs.Gateway
	g := a.addrs.Guest.As4()
	a.MAC = net.HardwareAddr{0x02, 0xc7, g[0], g[1], g[2], g[3]}
	a.policy.Store(&p)
	a.steps = policySteps(a.addrs, a.barred, h.denied, p)

	err := a.setup(ctx, adopt, o)
	a.built = err == nil
	if err != nil {
		// An adopted link stays with its running VM; a new one goes.
		if terr := a.teardown(!adopt); terr != nil {
			h.log.Error("undoing a failed attach", "sandbox", sandboxID, "err", terr)
		}
		h.mu.Lock()
		delete(h.attached, n.tag)
		if adopt {
			h.survivors[n.tag] = slot
		} else {
			h.alloc.release(n.tag)
		}
		h.mu.Unlock()
		return nil, fmt.Errorf("netpolicy: attach %s: %w", sandboxID, err)
	}
	if adopt {
		// The running VM's connections were made under the old daemon's
		// rules: keep only those the policy now in force allows.
		a.mu.Lock()
		a.revoke("attach over a running VM")
		a.mu.Unlock()
	}
	go a.expireLoop()
	h.checkPosition()
	h.log.Info("sandbox network attached", "sandbox", sandboxID, "link", n.link,
		"guest", a.GuestAddr, "entries", len(p.Entries()), "adopted", adopt)
	return a, nil
}

func (a *Attachment) setup(ctx context.Context, adopt bool, o attachOptions) error {
	h := a.h
	var left map[netip.Addr]*leftPin
	if adopt {
		// The old daemon's rules for this VM go; its link stays, and so
		// do the addresses DNS opened that are still due (adoptPins).
		var err error
		if left, err = h.readPins(a.names); err != nil {
			h.log.Warn("reading the DNS addresses an earlier daemon opened; closing them", "sandbox", a.SandboxID, "err", err)
		}
		if err := h.purge(a.names, false); err != nil {
			return err
		}
	}
	err := a.build(adopt, o)
	if err != nil && !adopt {
		// Something a crashed run left under this tag is in the way
		// (a link, a rule): remove it and try once more.
		h.log.Warn("attach failed; removing leftovers and retrying", "sandbox", a.SandboxID, "err", err)
		if perr := h.purge(a.names, true); perr != nil {
			return errors.Join(err, perr)
		}
		err = a.build(adopt, o)
	}
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(left) > 0 {
		kept, dropped := a.adoptPins(left, time.Now())
		h.log.Info("DNS addresses an earlier daemon opened", "sandbox", a.SandboxID, "kept", kept, "closed", dropped)
	}
	return a.startDNS()
}

// build installs the chains and rules in one transaction, then the link.
func (a *Attachment) build(adopt bool, o attachOptions) error {
	h, n := a.h, a.names
	var b batch
	for _, c := range []string{n.accept, n.reject, n.pins, n.policy[0]} {
		b.chain("filter", c)
	}
	b.appendRules(acceptRules(n))
	b.appendRules(rejectRules(n, a.addrs))
	b.appendRules(policyRules(n, 0, a.addrs, a.steps))
	b.insertRules(append(baseRules(n, a.addrs, h.cfg.Uplink), jumpRule(n, 0)))
	if err := h.ns.do(func() error { return h.apply(&b) }); err != nil {
		return fmt.Errorf("rules: %w", err)
	}
	if adopt {
		return nil
	}
	if err := h.ns.do(func() error { return a.createLink(o) }); err != nil {
		return fmt.Errorf("link %s: %w", n.link, err)
	}
	return nil
}

// createLink makes the TAP (or veth), names it for people, keeps IPv6 off
// it, turns on strict reverse-path filtering on it (a second source check
// behind the raw rule), gives it the gateway address and brings it up.
func (a *Attachment) createLink(o attachOptions) error {
	h, n := a.h, a.names
	var link netlink.Link
	if o.vethNS != "" {
		peerNS, err := netns.GetFromPath(o.vethNS)
		if err != nil {
			return fmt.Errorf("peer namespace: %w", err)
		}
		defer peerNS.Close()
		link = &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: n.link},
			PeerName:         o.vethPeer,
			PeerHardwareAddr: a.MAC,
			PeerNamespace:    netlink.NsFd(peerNS),
		}
	} else {
		link = &netlink.Tuntap{
			LinkAttrs: netlink.LinkAttrs{Name: n.link},
			Mode:      netlink.TUNTAP_MODE_TAP,
			Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR,
			Owner:     h.cfg.TAPOwner,
			Group:     h.cfg.TAPGroup,
		}
	}
	if err := netlink.LinkAdd(link); err != nil {
		return fmt.Errorf("create: %w", err)
	}
	if err := netlink.LinkSetAlias(link, "cellvm sandbox "+clip(a.SandboxID, 200)); err != nil {
		return fmt.Errorf("alias: %w", err)
	}
	err := os.WriteFile("/proc/sys/net/ipv6/conf/"+n.link+"/disable_ipv6", []byte("1"), 0o644)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("disable IPv6: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+n.link+"/rp_filter", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("strict reverse-path filter: %w", err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: a.addrs.Gateway.AsSlice(), Mask: net.CIDRMask(30, 32)}}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("address %v: %w", a.addrs.Gateway, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("up: %w", err)
	}
	return nil
}

// startDNS starts the resolver on the gateway's port 53, UDP and TCP.
func (a *Attachment) startDNS() error {
	h := a.h
	addr := netip.AddrPortFrom(a.addrs.Gateway, 53).String()
	var pc net.PacketConn
	var l net.Listener
	err := h.ns.do(func() error {
		lc := net.ListenConfig{Control: freebind}
		var err error
		if pc, err = lc.ListenPacket(context.Background(), "udp4", addr); err != nil {
			return err
		}
		if l, err = lc.Listen(context.Background(), "tcp4", addr); err != nil {
			pc.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("resolver on %s: %w", addr, err)
	}
	srv, err := dnsproxy.Serve(dnsproxy.Config{
		Allowed: func(name string) bool {
			_, ok := a.policy.Load().NamePorts(name)
			return ok
		},
		Admit:     a.admit,
		Client:    a.addrs.Guest,
		Upstreams: h.cfg.Upstreams,
		Dial:      h.ns.dial,
		MinTTL:    h.cfg.MinTTL,
		MaxTTL:    h.cfg.MaxTTL,
		Log:       h.log.With("sandbox", a.SandboxID),
	}, pc, l)
	if err != nil {
		pc.Close()
		l.Close()
		return err
	}
	a.dns = srv
	return nil
}

// Update replaces the policy. The new policy chain is built beside the old
// one and the jump to it swapped, so every packet sees one policy or the
// other. Addresses DNS opened stay open only for names still allowed, on
// the ports now allowed. Then the connections the new policy does not
// allow are cut (see revoke); those it allows are kept.
func (a *Attachment) Update(p egress.Policy) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	h, n := a.h, a.names
	next := 1 - a.gen
	// One transaction: the new chain, the jump swapped, the old chain
	// gone, and the DNS-opened addresses no longer allowed closed.
	var b batch
	b.chain("filter", n.policy[next])
	steps := policySteps(a.addrs, a.barred, h.denied, p)
	b.appendRules(policyRules(n, next, a.addrs, steps))
	b.insertRules([]rule{jumpRule(n, next)})
	b.deleteRules([]rule{jumpRule(n, a.gen)})
	b.deleteChains("filter", []string{n.policy[a.gen]})
	type change struct {
		ip    netip.Addr
		ports []uint16
		keep  bool
	}
	var changes []change
	for ip, pn := range a.pins {
		ports, ok := pinPorts(&p, pn.names)
		if ok && samePorts(ports, pn.ports) {
			continue
		}
		b.deleteRules(pn.rules(n, ip))
		if ok {
			b.appendRules(pinRules(n, ip, ports, pn.stop, pn.label))
		}
		changes = append(changes, change{ip, ports, ok})
	}
	if err := h.ns.do(func() error { return h.apply(&b) }); err != nil {
		return fmt.Errorf("netpolicy: update %s: %w", a.SandboxID, err)
	}
	a.gen = next
	a.steps = steps
	a.policy.Store(&p)
	for _, c := range changes {
		if c.keep {
			a.pins[c.ip].ports = c.ports
		} else {
			delete(a.pins, c.ip)
		}
	}
	a.revoke("policy update")
	h.checkPosition()
	h.log.Info("sandbox network policy replaced", "sandbox", a.SandboxID, "entries", len(p.Entries()))
	return nil
}

// Counters returns how many new connections (first packets) the policy
// let through and how many packets it refused, since Attach. If reading
// them fails the last values read are returned and the failure logged.
func (a *Attachment) Counters() (allowed, dropped uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return a.counted[0], a.counted[1]
	}
	var acc, rej uint64
	err := a.h.ns.do(func() error {
		var err error
		if acc, err = a.h.chainPackets(a.names.accept); err != nil {
			return err
		}
		rej, err = a.h.chainPackets(a.names.reject)
		return err
	})
	if err != nil {
		a.h.log.Warn("reading network counters", "sandbox", a.SandboxID, "err", err)
		return a.counted[0], a.counted[1]
	}
	a.counted = [2]uint64{acc, rej}
	return acc, rej
}

// DNSNames returns the resolver's answers per name (dnsproxy.Server.Names).
func (a *Attachment) DNSNames() []dnsproxy.NameCount {
	if a.dns == nil {
		return nil
	}
	return a.dns.Names()
}

// DNSStats returns the resolver's counts.
func (a *Attachment) DNSStats() dnsproxy.Stats {
	if a.dns == nil {
		return dnsproxy.Stats{}
	}
	return a.dns.Stats()
}

// Close removes everything Attach made: resolver, rules, chains, link,
// and gives the address back. It is safe to call more than once.
func (a *Attachment) Close() error {
	a.Counters() // the last counts, which Counters answers from now on
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	close(a.stop)
	<-a.done
	err := a.teardown(true)
	h := a.h
	h.mu.Lock()
	if h.attached[a.names.tag] == a {
		delete(h.attached, a.names.tag)
		h.alloc.release(a.names.tag)
	}
	h.mu.Unlock()
	if err == nil {
		h.log.Info("sandbox network removed", "sandbox", a.SandboxID, "link", a.TAP)
	}
	return err
}

// teardown removes the resolver, rules, chains and (if deleteLink) the
// link. After a failed Attach what exists is unknown, so it searches
// (purge); otherwise it removes what it knows it made in one transaction,
// and searches only if that fails.
func (a *Attachment) teardown(deleteLink bool) error {
	var errs []error
	if a.dns != nil {
		if err := a.dns.Close(); err != nil {
			errs = append(errs, fmt.Errorf("resolver: %w", err))
		}
	}
	h, n := a.h, a.names
	if !a.built {
		if err := h.purge(n, deleteLink); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	var b batch
	b.deleteRules(append(baseRules(n, a.addrs, h.cfg.Uplink), jumpRule(n, a.gen)))
	b.deleteChains("filter", []string{n.policy[a.gen], n.pins, n.accept, n.reject})
	err := h.ns.do(func() error {
		if err := h.apply(&b); err != nil {
			return err
		}
		if !deleteLink {
			return nil
		}
		l, err := netlink.LinkByName(n.link)
		if err != nil {
			return fmt.Errorf("find link %s: %w", n.link, err)
		}
		return netlink.LinkDel(l)
	})
	if err != nil {
		h.log.Warn("removing sandbox network; searching for leftovers", "sandbox", a.SandboxID, "err", err)
		if err := h.purge(n, deleteLink); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// chainPackets sums the packet counters of a chain's rules.
func (h *Host) chainPackets(chain string) (uint64, error) {
	stats, err := h.ipt.Stats("filter", chain)
	if err != nil {
		return 0, err
	}
	var sum uint64
	for _, s := range stats {
		if len(s) == 0 {
			continue
		}
		v, err := strconv.ParseUint(s[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("counter %q of %s: %w", s[0], chain, err)
		}
		sum += v
	}
	return sum, nil
}
