package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox/egress"
)

// The operator's egress rules: --egress-deny and --egress-allow-private
// become one egress.Guard at start. The tenant layer checks every
// network.allow against it (create, fork, policy update) and netpolicy
// keeps its closed ranges shut in the kernel (HostConfig.Egress).

// egressOptions are serve's egress flags and the rules made of them.
type egressOptions struct {
	deny, allowPrivate egressRanges
	// guard is the rules in force, made by resolve at start.
	guard egress.Guard
}

func (e *egressOptions) addFlags(fs *pflag.FlagSet) {
	e.deny.defaultOK = true
	fs.Var(&e.deny, "egress-deny", "`CIDR[,CIDR...]` ranges no sandbox may name in network.allow or reach, under any entry "+
		"(default: link-local, the cloud metadata addresses, loopback, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, "+
		"fc00::/7, 100.64.0.0/10, and this host's addresses and networks as found at start). A list replaces the default; "+
		"the word \"default\" in it stands for the default list. Link-local space and the metadata addresses are denied whatever it says")
	fs.Var(&e.allowPrivate, "egress-allow-private", "`CIDR[,CIDR...]` of the --egress-deny ranges that every tenant may name again "+
		"(a private range opened so still opens only to an entry naming it, not to 0.0.0.0/0); never a cloud metadata address")
}

// resolve makes the rules from the flags (with the host's addresses and
// networks, from interfaces, for the default list), logs them, and warns
// of a --public-ranges range they close.
func (e *egressOptions) resolve(log *slog.Logger, public []netip.Prefix, interfaces func() ([]netip.Addr, []netip.Prefix, error)) error {
	var deny []netip.Prefix
	if !e.deny.given || e.deny.withDefault {
		addrs, nets, err := interfaces()
		if err != nil {
			return fmt.Errorf("--egress-deny default: the host's addresses: %w (name the ranges with --egress-deny, without \"default\")", err)
		}
		deny = egress.DefaultDeny(addrs, nets)
	}
	e.guard = egress.NewGuard(append(deny, e.deny.list...), e.allowPrivate.list)
	log.Info("egress rules: no sandbox may name or reach the denied ranges",
		"egress_deny", prefixesString(e.guard.Deny), "egress_allow_private", prefixesString(e.guard.AllowPrivate))
	closed := e.guard.Closed()
	for _, p := range public {
		for _, c := range closed {
			if p.Overlaps(c) {
				log.Warn("a --public-ranges range lies in the egress deny list and stays closed; name it in --egress-allow-private too to open it",
					"public_range", p.String(), "denied", c.String())
				break
			}
		}
	}
	return nil
}

// hostInterfaces lists this host's addresses and the networks they are
// on (a read-only look at the daemon's network namespace), leaving out
// cellvm's own links, which carry the sandboxes' gateways.
func hostInterfaces() ([]netip.Addr, []netip.Prefix, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, nil, fmt.Errorf("list interfaces: %w", err)
	}
	var addrs []netip.Addr
	var nets []netip.Prefix
	for _, ifc := range ifs {
		if strings.HasPrefix(ifc.Name, "cvm-") {
			continue
		}
		as, err := ifc.Addrs()
		if err != nil {
			return nil, nil, fmt.Errorf("addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range as {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(n.IP)
			ones, _ := n.Mask.Size()
			if !ok {
				continue
			}
			ip = ip.Unmap()
			addrs = append(addrs, ip)
			if p, err := ip.Prefix(ones); err == nil {
				nets = append(nets, p)
			}
		}
	}
	return addrs, nets, nil
}

// egressRanges is --egress-deny's and --egress-allow-private's value.
type egressRanges struct {
	list        []netip.Prefix
	defaultOK   bool // the word "default" may stand in it for the default list
	withDefault bool // "default" was in it
	given       bool
}

func (r *egressRanges) String() string {
	s := prefixesString(r.list)
	if r.withDefault {
		s = strings.TrimSuffix("default,"+s, ",")
	}
	return s
}

func (r *egressRanges) Set(v string) error {
	r.given = true
	var items []string
	for _, f := range strings.Split(v, ",") {
		if strings.TrimSpace(f) == "default" && r.defaultOK {
			r.withDefault = true
			continue
		}
		items = append(items, f)
	}
	ps, err := egress.ParseRanges(items)
	if err != nil {
		return err
	}
	r.list = append(r.list, ps...)
	return nil
}

func (r *egressRanges) Type() string { return "CIDR[,CIDR...]" }

func prefixesString(ps []netip.Prefix) string {
	l := prefixList(ps)
	return l.String()
}
