package netcfg

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestWriteResolvConfReplacesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	os.WriteFile(target, []byte("nameserver 9.9.9.9\n"), 0o644)
	file := filepath.Join(dir, "etc", "resolv.conf")
	os.MkdirAll(filepath.Dir(file), 0o755)
	os.Symlink(target, file)
	if err := WriteResolvConf(file, []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::53")}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "nameserver 10.0.0.1\nnameserver fd00::53\n") {
		t.Fatalf("resolv.conf = %q", b)
	}
	if fi, _ := os.Lstat(file); fi.Mode()&os.ModeSymlink != 0 {
		t.Fatal("resolv.conf is still a symlink")
	}
	if b, _ := os.ReadFile(target); string(b) != "nameserver 9.9.9.9\n" {
		t.Fatal("the symlink's target was written")
	}
}

func TestAddHostsEntry(t *testing.T) {
	file := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(file, []byte("127.0.0.1 localhost"), 0o644)
	for range 2 {
		if err := AddHostsEntry(file, "box"); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(file)
	if string(b) != "127.0.0.1 localhost\n127.0.1.1\tbox\n" {
		t.Fatalf("hosts = %q", b)
	}
}

// TestUpInNetns configures a dummy eth0 in a fresh network namespace, on a
// locked thread that is thrown away afterwards.
// inNetns runs f on a thread of its own in a new network namespace with a
// veth pair, Iface and its peer peer0 (up, so Iface's routes are usable).
// It skips t where the namespace or the link cannot be made.
func inNetns(t *testing.T, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the namespace
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- nil
		errc <- func() error {
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: Iface}, PeerName: "peer0"}
			if err := netlink.LinkAdd(veth); err != nil {
				return errSkip{err}
			}
			if peer, err := netlink.LinkByName("peer0"); err == nil {
				netlink.LinkSetUp(peer)
			}
			return f()
		}()
	}()
	if err := <-errc; err != nil {
		t.Skipf("cannot create a network namespace: %v", err)
	}
	if err := <-errc; err != nil {
		if s, ok := err.(errSkip); ok {
			t.Skipf("cannot create a test link: %v", s.err)
		}
		t.Fatal(err)
	}
}

func TestUpInNetns(t *testing.T) {
	inNetns(t, func() error {
		cfg := Config{Addr: netip.MustParsePrefix("10.200.1.2/24"), Gateway: netip.MustParseAddr("10.200.1.1")}
		if err := Up(cfg, time.Second); err != nil {
			return err
		}
		link, err := netlink.LinkByName(Iface)
		if err != nil {
			return err
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			return fmt.Errorf("eth0 is down")
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.200.1.2/24" {
			return fmt.Errorf("addresses %v", addrs)
		}
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				if r.Gw.String() == "10.200.1.1" {
					return nil
				}
			}
		}
		return fmt.Errorf("no default route via 10.200.1.1 in %v", routes)
	})
}

type errSkip struct{ err error }

func (e errSkip) Error() string { return e.err.Error() }

// TestReconfigureInNetns: a fork's eth0 ends with its new address and
// default route only: none of its parent's address and route is left.
func TestReconfigureInNetns(t *testing.T) {
	inNetns(t, func() error {
		parent := Config{Addr: netip.MustParsePrefix("10.200.1.2/30"), Gateway: netip.MustParseAddr("10.200.1.1")}
		if err := Up(parent, time.Second); err != nil {
			return err
		}
		fork := Config{Addr: netip.MustParsePrefix("10.200.2.6/30"), Gateway: netip.MustParseAddr("10.200.2.5")}
		if err := Reconfigure(fork); err != nil {
			return err
		}
		link, err := netlink.LinkByName(Iface)
		if err != nil {
			return err
		}
		if link.Attrs().Flags&net.FlagUp == 0 {
			return fmt.Errorf("eth0 is down after the reconfiguration")
		}
		addrs, _ := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.200.2.6/30" {
			return fmt.Errorf("addresses after the reconfiguration %v, want only 10.200.2.6/30", addrs)
		}
		routes, _ := netlink.RouteList(link, netlink.FAMILY_V4)
		var gws []string
		for _, r := range routes {
			if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
				gws = append(gws, r.Gw.String())
			}
		}
		if len(gws) != 1 || gws[0] != "10.200.2.5" {
			return fmt.Errorf("default routes via %v, want only via 10.200.2.5", gws)
		}
		if err := Reconfigure(Config{Addr: netip.MustParsePrefix("fd00::6/64")}); err == nil {
			return fmt.Errorf("an IPv6 reconfiguration was taken")
		}
		return nil
	})
}

// TestAddHostsEntryOnABareImage: no /etc at all, or a dangling link in the
// hosts file's place: the entry is written in a regular file there, and
// nothing is created where the link pointed.
func TestAddHostsEntryOnABareImage(t *testing.T) {
	root := t.TempDir()
	file := filepath.Join(root, "etc", "hosts")
	if err := AddHostsEntry(file, "box"); err != nil {
		t.Fatalf("no /etc: %v", err)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), "127.0.0.1\tlocalhost") || !strings.Contains(string(b), "127.0.1.1\tbox\n") {
		t.Errorf("hosts = %q", b)
	}

	os.Remove(file)
	target := filepath.Join(t.TempDir(), "missing", "hosts")
	os.Symlink(target, file)
	if err := AddHostsEntry(file, "box"); err != nil {
		t.Fatalf("dangling link: %v", err)
	}
	if st, err := os.Lstat(file); err != nil || !st.Mode().IsRegular() {
		t.Errorf("hosts is %v, %v; want a regular file", st, err)
	}
	if _, err := os.Stat(target); err == nil {
		t.Error("the link's target was created")
	}

	// A link to a real file: its entries are kept.
	real := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(real, []byte("10.1.1.1 db\n"), 0o644)
	os.Remove(file)
	os.Symlink(real, file)
	if err := AddHostsEntry(file, "box"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != "10.1.1.1 db\n127.0.1.1\tbox\n" {
		t.Errorf("hosts through a link = %q", b)
	}
	if b, _ := os.ReadFile(real); string(b) != "10.1.1.1 db\n" {
		t.Errorf("the link's target was changed: %q", b)
	}
}
