package netpolicy

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestSpoofedSourceIsDropped: a guest that sends a DNS query in another
// sandbox's name, or a world host's, gets no answer, and nothing reaches
// the owner of the claimed address; the packet is dropped in raw
// PREROUTING, before the resolver sees it.
func TestSpoofedSourceIsDropped(t *testing.T) {
	tn := newTestNet(t)
	h := testHost(t, tn)
	ctx := context.Background()
	g1path, g2path := tn.guest(1), tn.guest(2)
	g1, g2 := nsRunner{g1path}, nsRunner{g2path}
	a1, err := h.Attach(ctx, "sb-spoofer", mustParse(t, "allowed.test"), WithVethPeer(g1path, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	defer a1.Close()
	a2, err := h.Attach(ctx, "sb-victim", mustParse(t, "203.0.113.7"), WithVethPeer(g2path, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	configureGuest(t, g1path, a1)
	configureGuest(t, g2path, a2)
	victim := a2.GuestAddr.Addr()
	world := netip.MustParseAddr("203.0.113.7")
	// The spoofer owns the claimed addresses too, so its kernel sends
	// from them.
	g1name := g1path[strings.LastIndexByte(g1path, '/')+1:]
	for _, ip := range []netip.Addr{victim, world} {
		sh(t, "ip", "-n", g1name, "addr", "add", ip.String()+"/32", "dev", "eth0")
	}

	// Where a reply to the spoofed queries would arrive.
	_, atVictim := tn.listen(g2, "udp4", "0.0.0.0:5353")
	_, atWorld := tn.listen(tn.worldNS, "udp4", world.String()+":5353")
	defer atVictim.Close()
	defer atWorld.Close()

	// Control: from its own address the same query is answered.
	if rc, _ := lookup(t, g1, a1.DNS, "unlisted.test"); rc != dns.RcodeNameError {
		t.Fatalf("control query from the guest's own address: %s, want NXDOMAIN", dns.RcodeToString[rc])
	}
	for _, from := range []netip.Addr{victim, world} {
		var c net.PacketConn
		err := g1.do(func() error {
			var err error
			c, err = net.ListenPacket("udp4", netip.AddrPortFrom(from, 5353).String())
			return err
		})
		if err != nil {
			t.Fatalf("bind %v in the spoofer: %v", from, err)
		}
		q := new(dns.Msg)
		q.SetQuestion("secret-for-the-victim.test.", dns.TypeA)
		b, _ := q.Pack()
		for i := 0; i < 3; i++ {
			if _, err := c.WriteTo(b, &net.UDPAddr{IP: a1.DNS.AsSlice(), Port: 53}); err != nil {
				t.Fatalf("send from %v: %v", from, err)
			}
		}
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if n, _, err := c.ReadFrom(make([]byte, 512)); err == nil {
			t.Errorf("query from %v: the spoofer got %d bytes back", from, n)
		}
		c.Close()
	}
	for name, pc := range map[string]net.PacketConn{"the other sandbox": atVictim, "the world host": atWorld} {
		pc.SetReadDeadline(time.Now().Add(time.Second))
		if n, from, err := pc.ReadFrom(make([]byte, 512)); err == nil {
			t.Errorf("%s got %d bytes from %v after the spoofed queries", name, n, from)
		}
	}
	if st := a1.DNSStats(); st.Ignored != 0 {
		t.Errorf("the resolver saw %d spoofed queries; the host should drop them before it", st.Ignored)
	}
	if n := rawDrops(t, tn, a1); n < 6 {
		t.Errorf("raw PREROUTING dropped %d packets from %s, want the 6 spoofed queries", n, a1.TAP)
	}
}

// rawDrops reads the packet counter of a's source check in raw PREROUTING.
func rawDrops(t *testing.T, tn *testNet, a *Attachment) uint64 {
	t.Helper()
	out := sh(t, "ip", "netns", "exec", tn.host, "iptables", "-t", "raw", "-v", "-x", "-n", "-L", preChain)
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && strings.Contains(line, a.TAP) && strings.Contains(line, "DROP") {
			n, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil {
				t.Fatalf("counter in %q: %v", line, err)
			}
			return n
		}
	}
	t.Fatalf("no source check for %s in raw %s:\n%s", a.TAP, preChain, out)
	return 0
}
