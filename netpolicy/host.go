package netpolicy

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress"

	"github.com/coreos/go-iptables/iptables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
)

// Defaults for HostConfig's zero fields.
var DefaultPool = netip.MustParsePrefix("10.222.0.0/16")

const (
	DefaultMinTTL         = 30 * time.Second
	DefaultMaxTTL         = 5 * time.Minute
	DefaultPinGrace       = 5 * time.Second
	DefaultMaxPins        = 1024
	DefaultExpiryInterval = time.Second
)

// HostConfig configures the host side of every VM's network.
type HostConfig struct {
	// Pool is where the VMs' /30 links come from (default 10.222.0.0/16).
	// It must lie in a private range; no guest can reach it.
	Pool netip.Prefix
	// Uplink is the interface guest traffic is masqueraded out of; empty
	// masquerades out of any interface.
	Uplink string
	// Upstreams are the "ip:port" resolvers the VMs' DNS resolvers ask;
	// empty reads /etc/resolv.conf.
	Upstreams []string
	// MinTTL and MaxTTL clamp how long an address handed out by DNS stays
	// open (and the TTL the guest is told).
	MinTTL, MaxTTL time.Duration
	// PinGrace is added to the TTL before an address is closed again, for
	// a guest that resolves and connects a little later.
	PinGrace time.Duration
	// MaxPins bounds the addresses DNS may open per VM at a time.
	MaxPins int
	// ExpiryInterval is how often expired addresses are closed.
	ExpiryInterval time.Duration
	// PositionCheck is how often the jumps to cellvm's chains are checked
	// and put back on top of the host's chains (see hold.go).
	PositionCheck time.Duration
	// TAPOwner and TAPGroup own the TAPs, for a VMM that does not run as
	// root (0: root).
	TAPOwner, TAPGroup uint32
	// NetNS is the path of the network namespace the host side lives in
	// (links, rules, resolvers); empty is the daemon's own.
	NetNS string
	// PublicRanges are ranges of the denied set (see specialRanges) that
	// behave as public on this host, such as a documentation range its
	// network really uses: entries and DNS answers open them like any
	// public address. They may not cover a metadata address, nor lie in
	// a range that is never a destination.
	PublicRanges []netip.Prefix
	// Egress are the operator's rules (cellvm serve --egress-deny and
	// --egress-allow-private). The ranges of Egress.Closed() are shut to
	// every sandbox whatever its entries name, however specifically (the
	// API refuses such entries first: egress.Guard.Check), and a DNS
	// answer into one is removed. An Attach can open more of them
	// (WithAllowPrivate). The parts AllowPrivate opens behave as they
	// would without these rules: a special range among them opens only to
	// an entry that names it. The rules win over PublicRanges: a public
	// range they close stays closed. Only IPv4 ranges need rules (no
	// sandbox has an IPv6 path); the zero Guard closes nothing.
	Egress egress.Guard
}

// Host is the host-wide part: the base chains, the address pool and the
// live attachments. It is safe for concurrent use.
type Host struct {
	cfg  HostConfig
	log  *slog.Logger
	ns   nsRunner
	ipt  *iptables.IPTables
	ipt6 *iptables.IPTables // nil without ip6tables
	// restorePath is iptables-restore, of the same flavour as iptables;
	// restore6Path ip6tables-restore.
	restorePath, restore6Path string
	// denied are the ranges no policy step opens unless an entry inside
	// one names it.
	denied []netip.Prefix
	// barred are the operator's closed ranges (IPv4): no entry opens them.
	barred []netip.Prefix

	holdMu    sync.Mutex // one position check at a time
	closing   chan struct{}
	holdDone  chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex
	alloc     *allocator
	attached  map[string]*Attachment // by tag
	survivors map[string]int         // tag -> slot of a live VM's link found by Sweep
}

// NewHost checks cfg, turns on IPv4 forwarding and installs the base
// chains (idempotently: a restarted daemon finds them in place).
func NewHost(cfg HostConfig, log *slog.Logger) (*Host, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = DefaultMinTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MaxTTL < cfg.MinTTL {
		return nil, fmt.Errorf("netpolicy: max TTL %v below min TTL %v", cfg.MaxTTL, cfg.MinTTL)
	}
	if cfg.PinGrace < 0 {
		cfg.PinGrace = 0
	} else if cfg.PinGrace == 0 {
		cfg.PinGrace = DefaultPinGrace
	}
	if cfg.MaxPins <= 0 {
		cfg.MaxPins = DefaultMaxPins
	}
	if cfg.ExpiryInterval <= 0 {
		cfg.ExpiryInterval = DefaultExpiryInterval
	}
	if cfg.PositionCheck <= 0 {
		cfg.PositionCheck = DefaultPositionCheck
	}
	if cfg.Uplink != "" && len(cfg.Uplink) > 15 {
		return nil, fmt.Errorf("netpolicy: uplink name %q too long", cfg.Uplink)
	}
	if len(cfg.Upstreams) == 0 {
		rc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("netpolicy: no upstream resolver given and /etc/resolv.conf: %w", err)
		}
		for _, s := range rc.Servers {
			cfg.Upstreams = append(cfg.Upstreams, net.JoinHostPort(s, rc.Port))
		}
	}
	for _, u := range cfg.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return nil, fmt.Errorf("netpolicy: upstream resolver %q: want ip:port", u)
		}
	}
	alloc, err := newAllocator(cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	if err := checkPublic(cfg.PublicRanges, cfg.Pool); err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(10))
	if err != nil {
		return nil, fmt.Errorf("netpolicy: iptables: %w", err)
	}
	restorePath, err := exec.LookPath("iptables-restore")
	if err != nil {
		return nil, fmt.Errorf("netpolicy: %w", err)
	}
	h := &Host{
		cfg: cfg, log: log, ns: nsRunner{path: cfg.NetNS}, ipt: ipt, restorePath: restorePath,
		denied: deniedSet(cfg.PublicRanges), barred: barredV4(cfg.Egress),
		alloc: alloc, attached: map[string]*Attachment{}, survivors: map[string]int{},
		closing: make(chan struct{}), holdDone: make(chan struct{}),
	}
	// No policy opens IPv6 (egress.Parse refuses IPv6 entries), so IPv6 from
	// and to the links is dropped; a host whose kernel speaks IPv6 but
	// whose ip6tables does not work cannot promise that.
	if err := h.ns.do(func() error { _, err := os.Stat("/proc/sys/net/ipv6"); return err }); err == nil {
		if h.ipt6, err = iptables.New(iptables.IPFamily(iptables.ProtocolIPv6), iptables.Timeout(10)); err != nil {
			return nil, fmt.Errorf("netpolicy: ip6tables (needed to keep IPv6 off the sandboxes' links): %w", err)
		}
		if h.restore6Path, err = exec.LookPath("ip6tables-restore"); err != nil {
			return nil, fmt.Errorf("netpolicy: %w", err)
		}
	} else {
		log.Info("this kernel has no IPv6: nothing to close there")
	}
	if err := h.ns.writeSysctl("/proc/sys/net/ipv4/ip_forward", "1"); err != nil {
		return nil, fmt.Errorf("netpolicy: enable IPv4 forwarding: %w", err)
	}
	if err := h.ns.do(h.installBase); err != nil {
		return nil, fmt.Errorf("netpolicy: base chains: %w", err)
	}
	if err := h.ns.do(h.probeMatches); err != nil {
		return nil, fmt.Errorf("netpolicy: iptables matches the pins need (time, comment): %w", err)
	}
	if err := h.probeConntrack(); err != nil {
		return nil, fmt.Errorf("netpolicy: conntrack (needed to cut revoked connections; is nf_conntrack_netlink available?): %w", err)
	}
	// A jump that exists below another manager's rules is moved up now.
	if err := h.holdPosition(); err != nil {
		return nil, fmt.Errorf("netpolicy: base chains: %w", err)
	}
	go h.holdLoop()
	return h, nil
}

// installBase creates the host-wide chains, their catch-all drops and the
// jumps to them at the top of FORWARD, INPUT and POSTROUTING.
func (h *Host) installBase() error {
	for _, c := range baseChains {
		ok, err := h.ipt.ChainExists(c.table, c.chain)
		if err != nil {
			return err
		}
		if !ok {
			if err := h.ipt.NewChain(c.table, c.chain); err != nil {
				return err
			}
		}
	}
	for _, r := range catchAllRules {
		if err := h.ipt.AppendUnique(r.Table, r.Chain, r.Spec...); err != nil {
			return err
		}
	}
	for _, r := range hostJumps() {
		if err := h.ipt.InsertUnique(r.Table, r.Chain, 1, r.Spec...); err != nil {
			return err
		}
	}
	if h.ipt6 != nil {
		if ok, err := h.ipt6.ChainExists("filter", ip6Chain); err != nil || !ok {
			if err == nil {
				err = h.ipt6.NewChain("filter", ip6Chain)
			}
			if err != nil {
				return fmt.Errorf("ip6tables chain %s: %w", ip6Chain, err)
			}
		}
		for _, r := range ip6Rules {
			if err := h.ipt6.AppendUnique(r.Table, r.Chain, r.Spec...); err != nil {
				return fmt.Errorf("ip6tables %s %s: %w", r.Chain, strings.Join(r.Spec, " "), err)
			}
		}
		for _, r := range ip6Jumps() {
			if err := h.ipt6.InsertUnique(r.Table, r.Chain, 1, r.Spec...); err != nil {
				return fmt.Errorf("ip6tables %s %s: %w", r.Chain, strings.Join(r.Spec, " "), err)
			}
		}
	}
	return nil
}

// probeMatches makes and removes a scratch chain with a rule as the pins
// use: a host without xt_time fails here, not at a guest's first lookup.
func (h *Host) probeMatches() error {
	const c = chainPrefix + "PROBE"
	var b batch
	b.chain("filter", c)
	b.appendRules([]rule{{"filter", c, []string{"-m", "time", "--datestop", time.Now().UTC().Format(datestopLayout),
		"-m", "comment", "--comment", "cellvm", "-j", "RETURN"}}})
	b.deleteChains("filter", []string{c})
	return h.apply(&b)
}

// Sweep removes what sandboxes not in liveIDs left behind: attachments of
// this process, links, chains and rules. Links of live sandboxes that
// survived a daemon restart are kept and their addresses reserved, so that
// Attach for them adopts the link (the VMM still has it open).
func (h *Host) Sweep(liveIDs []string) error {
	live := map[string]bool{}
	for _, id := range liveIDs {
		live[Tag(id)] = true
	}
	h.mu.Lock()
	var stale []*Attachment
	for tag, a := range h.attached {
		if !live[tag] {
			stale = append(stale, a)
		}
	}
	h.mu.Unlock()
	var errs []error
	for _, a := range stale {
		if err := a.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	found, links, err := h.findTags()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("netpolicy: sweep: %w", err))...)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for tag := range found {
		if _, ok := h.attached[tag]; ok {
			continue
		}
		if !live[tag] {
			h.log.Info("removing stale sandbox network", "tag", tag)
			if err := h.purge(namesFor(tag), true); err != nil {
				errs = append(errs, err)
			}
			delete(h.survivors, tag)
			continue
		}
		gw, ok := links[tag]
		if !ok {
			continue // rules without a link: Attach replaces them
		}
		slot := h.alloc.slotOf(gw)
		if err := h.alloc.reserve(tag, slot); err != nil {
			errs = append(errs, fmt.Errorf("netpolicy: sweep: live link %s%s: %w", linkPrefix, tag, err))
			continue
		}
		h.survivors[tag] = slot
	}
	return errors.Join(errs...)
}

// findTags lists the tags that own links, chains or base rules, and the
// gateway address of each link that has one.
func (h *Host) findTags() (map[string]bool, map[string]netip.Addr, error) {
	found := map[string]bool{}
	links := map[string]netip.Addr{}
	err := h.ns.do(func() error {
		ls, err := netlink.LinkList()
		if err != nil {
			return fmt.Errorf("list links: %w", err)
		}
		for _, l := range ls {
			tag := tagOfLink(l.Attrs().Name)
			if tag == "" {
				continue
			}
			found[tag] = true
			addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
			if err != nil {
				return fmt.Errorf("addresses of %s: %w", l.Attrs().Name, err)
			}
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && h.cfg.Pool.Contains(ip) {
					links[tag] = ip
				}
			}
		}
		chains, err := h.ipt.ListChains("filter")
		if err != nil {
			return err
		}
		for _, c := range chains {
			if tag := tagOfChain(c); tag != "" {
				found[tag] = true
			}
		}
		for _, c := range baseChains {
			rules, err := h.ipt.List(c.table, c.chain)
			if err != nil {
				return err
			}
			for _, r := range rules {
				for _, f := range strings.Fields(r) {
					f = strings.Trim(f, `"`)
					if tag := tagOfLink(f); tag != "" {
						found[tag] = true
					} else if tag := tagOfChain(f); tag != "" {
						found[tag] = true
					}
				}
			}
		}
		return nil
	})
	return found, links, err
}

// purge removes a VM's rules and chains, and its link if deleteLink. It
// goes on past errors so that as much as possible is gone.
func (h *Host) purge(n objectNames, deleteLink bool) error {
	var errs []error
	err := h.ns.do(func() error {
		for _, c := range baseChains {
			rules, err := h.ipt.List(c.table, c.chain)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, r := range rules {
				spec, ok := ruleOf(r, c.chain, n)
				if !ok {
					continue
				}
				if err := h.ipt.Delete(c.table, c.chain, spec...); err != nil {
					errs = append(errs, fmt.Errorf("delete %q: %w", r, err))
				}
			}
		}
		chains, err := h.ipt.ListChains("filter")
		if err != nil {
			errs = append(errs, err)
		}
		var mine []string
		for _, c := range chains {
			if tagOfChain(c) == n.tag {
				mine = append(mine, c)
			}
		}
		// Flush all first: the chains jump to each other.
		for _, c := range mine {
			if err := h.ipt.ClearChain("filter", c); err != nil {
				errs = append(errs, err)
			}
		}
		for _, c := range mine {
			if err := h.ipt.DeleteChain("filter", c); err != nil {
				errs = append(errs, err)
			}
		}
		if deleteLink {
			l, err := netlink.LinkByName(n.link)
			if err == nil {
				if err := netlink.LinkDel(l); err != nil {
					errs = append(errs, fmt.Errorf("delete link %s: %w", n.link, err))
				}
			} else if !errors.As(err, &netlink.LinkNotFoundError{}) {
				errs = append(errs, fmt.Errorf("find link %s: %w", n.link, err))
			}
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netpolicy: remove %s: %w", n.link, err)
	}
	return nil
}

// ruleOf returns the spec of a listed rule ("-A CHAIN spec...") if it
// belongs to the VM named by n.
func ruleOf(listed, chain string, n objectNames) ([]string, bool) {
	f := strings.Fields(listed)
	for i := range f {
		f[i] = strings.Trim(f[i], `"`)
	}
	if len(f) < 3 || f[0] != "-A" || f[1] != chain {
		return nil, false
	}
	for _, tok := range f[2:] {
		if tok == n.link || tagOfChain(tok) == n.tag {
			return f[2:], true
		}
	}
	return nil, false
}
