// Package netcfg configures the guest's network from the kernel command
// line: loopback always, and eth0 with a static address, a default route
// and name servers when the host gave the VM a network device. There is no
// DHCP client: the host already knows the address it assigned, and a
// static configuration costs no boot time.
package netcfg

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// Iface is the interface the host's TAP device appears as.
const Iface = "eth0"

// Config is the static configuration of Iface.
type Config struct {
	Addr    netip.Prefix // invalid: no network
	Gateway netip.Addr   // invalid: no default route
}

// Up brings up lo and, when cfg.Addr is valid, configures Iface, waiting
// up to wait for it to appear.
func Up(cfg Config, wait time.Duration) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	if !cfg.Addr.IsValid() {
		return nil
	}
	var link netlink.Link
	deadline := time.Now().Add(wait)
	for {
		link, err = netlink.LinkByName(Iface)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("find %s: %w", Iface, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{
		IP:   net.IP(cfg.Addr.Addr().AsSlice()),
		Mask: net.CIDRMask(cfg.Addr.Bits(), cfg.Addr.Addr().BitLen()),
	}}
	if err := netlink.AddrReplace(link, addr); err != nil {
		return fmt.Errorf("address %v on %s: %w", cfg.Addr, Iface, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("bring up %s: %w", Iface, err)
	}
	if cfg.Gateway.IsValid() {
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(cfg.Gateway.AsSlice())}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("default route via %v: %w", cfg.Gateway, err)
		}
	}
	return nil
}

// WriteResolvConf writes name servers to file (the overlay's
// /etc/resolv.conf), replacing what is there, a symlink included.
func WriteResolvConf(file string, dns []netip.Addr) error {
	if len(dns) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("# written by cellvm-init: the sandbox's resolver\n")
	for _, a := range dns {
		fmt.Fprintf(&b, "nameserver %s\n", a)
	}
	b.WriteString("options timeout:2 attempts:2\n")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	return nil
}

// AddHostsEntry makes hostname resolve locally (127.0.1.1, as Debian
// does) so programs that look up their own name do not wait on DNS. An
// image may have no hosts file, or a link in its place (dangling, or into
// a directory the image does not have): the file is then written in the
// link's place, with what the link led to, if anything.
func AddHostsEntry(file, hostname string) error {
	old, err := readBounded(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("hosts: %w", err)
	}
	for _, line := range strings.Split(string(old), "\n") {
		f := strings.Fields(line)
		for _, name := range f[min(1, len(f)):] {
			if name == hostname {
				return nil
			}
		}
	}
	if len(old) == 0 {
		old = []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	} else if old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	out := append(old, []byte("127.0.1.1\t"+hostname+"\n")...)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	if st, err := os.Lstat(file); err == nil && st.Mode()&os.ModeSymlink != 0 {
		if err := os.Remove(file); err != nil {
			return fmt.Errorf("hosts: %w", err)
		}
	}
	if err := os.WriteFile(file, out, 0o644); err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	return nil
}

// Reconfigure gives Iface a new address and default route in place of
// the ones it has: a guest restored from a snapshot is another sandbox,
// with a TAP and an address of its own. The link goes down and up in
// between, which drops its neighbour entries and every route through it
// (the parent's gateway among them). IPv6 is off on the host's side of the
// link; only IPv4 addresses are replaced.
func Reconfigure(cfg Config) error {
	if !cfg.Addr.IsValid() || !cfg.Addr.Addr().Is4() {
		return fmt.Errorf("reconfigure %s: %v is not an IPv4 address", Iface, cfg.Addr)
	}
	link, err := netlink.LinkByName(Iface)
	if err != nil {
		return fmt.Errorf("reconfigure: find %s: %w", Iface, err)
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return fmt.Errorf("reconfigure: bring down %s: %w", Iface, err)
	}
	old, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("reconfigure: addresses of %s: %w", Iface, err)
	}
	for i := range old {
		if err := netlink.AddrDel(link, &old[i]); err != nil {
			return fmt.Errorf("reconfigure: remove %v from %s: %w", old[i].IPNet, Iface, err)
		}
	}
	return Up(cfg, 0)
}

// maxHostsBytes bounds what is read of an image's hosts file.
const maxHostsBytes = 1 << 20

func readBounded(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxHostsBytes+1))
	if err == nil && len(b) > maxHostsBytes {
		err = fmt.Errorf("%s is over %d bytes", file, maxHostsBytes)
	}
	return b, err
}
