package netpolicy

// The namespace test builds a small internet in network namespaces and
// runs the real Host against it:
//
//	world  (W)  servers on TEST-NET addresses, :80 and :443, plus servers
//	            on private, CGN and link-local addresses (169.254.169.254)
//	            and a DNS zone server at 203.0.113.53
//	host   (H)  the daemon's side: uplink up0 192.0.2.2 -> W, iptables,
//	            the resolvers, an HTTP server on :8080 (the host itself)
//	guestN (GN) a VM stand-in: eth0, the peer of the veth Attach makes
//
// Nothing touches the machine's own namespace: links, rules and servers
// all live in the test's namespaces, deleted at the end.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress"

	"github.com/cellvm/cellvm/guestinit/cmdline"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"
)

type testNet struct {
	t               *testing.T
	prefix          string
	world, host     string // namespace names
	worldNS, hostNS nsRunner
	closers         []func()
}

func (tn *testNet) nsPath(name string) string { return "/var/run/netns/" + name }

func requireNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and iptables")
	}
	for _, bin := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s in PATH: %v", bin, err)
		}
	}
	name := fmt.Sprintf("cvtprobe%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("ip netns add fails here (%v: %s)", err, out)
	}
	defer exec.Command("ip", "netns", "del", name).Run()
	if out, err := exec.Command("ip", "netns", "exec", name, "iptables", "-t", "nat", "-S").CombinedOutput(); err != nil {
		t.Skipf("iptables (nat) does not work in a network namespace here (%v: %s)", err, out)
	}
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newTestNet(t *testing.T) *testNet {
	requireNetns(t)
	p := fmt.Sprintf("cvt%d", os.Getpid()%100000)
	tn := &testNet{t: t, prefix: p, world: p + "w", host: p + "h"}
	tn.worldNS = nsRunner{tn.nsPath(tn.world)}
	tn.hostNS = nsRunner{tn.nsPath(tn.host)}
	for _, ns := range []string{tn.world, tn.host} {
		sh(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	t.Cleanup(func() {
		for i := len(tn.closers) - 1; i >= 0; i-- {
			tn.closers[i]()
		}
	})
	w, h := tn.world, tn.host
	sh(t, "ip", "link", "add", "wup", "netns", w, "type", "veth", "peer", "name", "up0", "netns", h)
	sh(t, "ip", "-n", w, "addr", "add", "192.0.2.1/24", "dev", "wup")
	sh(t, "ip", "-n", w, "link", "set", "wup", "up")
	sh(t, "ip", "-n", h, "addr", "add", "192.0.2.2/24", "dev", "up0")
	sh(t, "ip", "-n", h, "link", "set", "up0", "up")
	sh(t, "ip", "-n", h, "route", "add", "default", "via", "192.0.2.1")
	for _, a := range []string{
		"203.0.113.7", "203.0.113.8", "203.0.113.50", "203.0.113.51", "203.0.113.52", "203.0.113.53",
		"203.0.113.60", "203.0.113.61", "203.0.113.62", "203.0.113.63",
		"198.51.100.10", "10.99.0.1", "172.16.5.5", "169.254.169.254", "100.64.0.9",
		"203.0.113.70", "203.0.113.71",
		"168.63.129.16", "192.0.0.192", "100.100.100.200", "198.18.0.1", "240.0.0.1", "8.8.8.8",
	} {
		sh(t, "ip", "-n", w, "addr", "add", a+"/32", "dev", "lo")
	}
	// The world's servers answer with the address they were reached on.
	for _, port := range []string{"80", "443"} {
		tn.serveHTTP(tn.worldNS, "0.0.0.0:"+port, "world")
	}
	tn.serveHTTP(tn.hostNS, "0.0.0.0:8080", "host")
	for _, a := range []string{"203.0.113.7", "203.0.113.70", "203.0.113.71"} {
		tn.serveEcho(tn.worldNS, a+":7") // on the address: UDP replies come from it
	}
	tn.serveZone()
	return tn
}

func (tn *testNet) listen(ns nsRunner, network, addr string) (l net.Listener, pc net.PacketConn) {
	tn.t.Helper()
	err := ns.do(func() error {
		var err error
		if network == "tcp4" {
			l, err = net.Listen(network, addr)
		} else {
			pc, err = net.ListenPacket(network, addr)
		}
		return err
	})
	if err != nil {
		tn.t.Fatalf("listen %s %s in %s: %v", network, addr, ns.path, err)
	}
	return l, pc
}

func (tn *testNet) serveHTTP(ns nsRunner, addr, who string) {
	l, _ := tn.listen(ns, "tcp4", addr)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", who, r.Context().Value(http.LocalAddrContextKey))
	})}
	go srv.Serve(l)
	tn.closers = append(tn.closers, func() { srv.Close() })
}

// serveZone runs the world's DNS: the names the tests resolve.
func (tn *testNet) serveZone() {
	zone := map[string][]string{
		"allowed.test.":          {"A 203.0.113.50"},
		"multi.test.":            {"A 203.0.113.51"},
		"unlisted.test.":         {"A 203.0.113.8"},
		"short.test.":            {"A 203.0.113.60"},
		"cname.test.":            {"CNAME target.elsewhere.test."},
		"target.elsewhere.test.": {"A 203.0.113.61"},
		"www.wild.test.":         {"A 203.0.113.62"},
		"wild.test.":             {"A 203.0.113.62"},
		`x\.wild.test.`:          {"A 203.0.113.62"}, // one label "x.wild" under test
		"port.test.":             {"A 203.0.113.63"},
		"echo.test.":             {"A 203.0.113.71"},
		// A listed name whose answer points into private and link-local
		// space (DNS rebinding): the guest must get only the public one.
		"rebind.test.": {"A 10.99.0.1", "A 169.254.169.254", "A 203.0.113.50"},
	}
	ttl := map[string]int{"short.test.": 1, "echo.test.": 1}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		recs, ok := zone[strings.ToLower(q.Name)]
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		name := strings.ToLower(q.Name)
		for hop := 0; hop < 4 && ok; hop++ {
			next := ""
			for _, rec := range recs {
				typ, val, _ := strings.Cut(rec, " ")
				t := ttl[name]
				if t == 0 {
					t = 60
				}
				rr, err := dns.NewRR(fmt.Sprintf("%s %d IN %s %s", name, t, typ, val))
				if err != nil {
					tn.t.Errorf("zone record: %v", err)
					continue
				}
				if typ == "CNAME" {
					m.Answer = append(m.Answer, rr)
					next = val
				} else if q.Qtype == dns.TypeA {
					m.Answer = append(m.Answer, rr)
				}
			}
			if next == "" {
				break
			}
			name = next
			recs = zone[next]
		}
		w.WriteMsg(m)
	})
	_, pc := tn.listen(tn.worldNS, "udp4", "203.0.113.53:53")
	l, _ := tn.listen(tn.worldNS, "tcp4", "203.0.113.53:53")
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: l, Handler: h}} {
		go s.ActivateAndServe()
		tn.closers = append(tn.closers, func() { s.Shutdown() })
	}
}

// guest makes a namespace standing in for a VM and returns its path.
func (tn *testNet) guest(n int) string {
	name := fmt.Sprintf("%sg%d", tn.prefix, n)
	sh(tn.t, "ip", "netns", "add", name)
	tn.t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	sh(tn.t, "ip", "-n", name, "link", "set", "lo", "up")
	return tn.nsPath(name)
}

// configureGuest does what the guest init does with the kernel command
// line Attach produced.
func configureGuest(t *testing.T, nsPath string, a *Attachment) {
	t.Helper()
	c, warns := cmdline.Parse(a.KernelArgs())
	if len(warns) != 0 || !c.Addr.IsValid() || !c.Gateway.IsValid() || len(c.DNS) != 1 {
		t.Fatalf("guest init cannot use %q: %v %+v", a.KernelArgs(), warns, c)
	}
	name := nsPath[strings.LastIndexByte(nsPath, '/')+1:]
	sh(t, "ip", "-n", name, "addr", "add", c.Addr.String(), "dev", "eth0")
	sh(t, "ip", "-n", name, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", name, "route", "add", "default", "via", c.Gateway.String())
}

// reach connects from ns to addr and, if it connects, GETs / over HTTP.
func reach(ns nsRunner, addr string) (string, time.Duration, error) {
	start := time.Now()
	cl := &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{DialContext: ns.dial, DisableKeepAlives: true},
	}
	resp, err := cl.Get("http://" + addr + "/")
	if err != nil {
		return "", time.Since(start), err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), time.Since(start), err
}

func mustReach(t *testing.T, ns nsRunner, addr string) {
	t.Helper()
	body, _, err := reach(ns, addr)
	if err != nil {
		t.Errorf("%s from %s: %v, want reachable", addr, ns.path, err)
		return
	}
	host, _, _ := net.SplitHostPort(addr)
	if !strings.Contains(body, host) {
		t.Errorf("%s from %s: body %q does not name it", addr, ns.path, body)
	}
}

// mustRefuse wants a connection refused (a reset), quickly: the guest
// fails fast instead of timing out.
func mustRefuse(t *testing.T, ns nsRunner, addr string) {
	t.Helper()
	_, took, err := reach(ns, addr)
	if err == nil {
		t.Errorf("%s from %s: reachable, want refused", addr, ns.path)
		return
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("%s from %s: %v, want connection refused", addr, ns.path, err)
	}
	if took > time.Second {
		t.Errorf("%s from %s: refused after %v, want under 1 s", addr, ns.path, took)
	}
}

// lookup asks the guest's resolver for name's A records over UDP.
func lookup(t *testing.T, ns nsRunner, server netip.Addr, name string) (int, []string) {
	t.Helper()
	return lookupOver(t, "udp4", ns, server, name)
}

// lookupTCP is lookup over TCP.
func lookupTCP(t *testing.T, ns nsRunner, server netip.Addr, name string) (int, []string) {
	t.Helper()
	return lookupOver(t, "tcp4", ns, server, name)
}

func lookupOver(t *testing.T, network string, ns nsRunner, server netip.Addr, name string) (int, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := ns.dial(ctx, network, netip.AddrPortFrom(server, 53).String())
	if err != nil {
		t.Fatalf("dial resolver: %v", err)
	}
	defer c.Close()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Timeout: 3 * time.Second}).ExchangeWithConnContext(ctx, q, &dns.Conn{Conn: c})
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	var addrs []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	return r.Rcode, addrs
}

var testPublic = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("198.51.100.0/24")}

func testHost(t *testing.T, tn *testNet) *Host {
	t.Helper()
	return testHostWith(t, tn, nil)
}

// testHostWith is testHost with its configuration changed by edit.
func testHostWith(t *testing.T, tn *testNet, edit func(*HostConfig)) *Host {
	t.Helper()
	cfg := HostConfig{
		NetNS:          tn.nsPath(tn.host),
		Uplink:         "up0",
		Upstreams:      []string{"203.0.113.53:53"},
		MinTTL:         time.Second,
		MaxTTL:         time.Minute,
		PinGrace:       -1,
		ExpiryInterval: 100 * time.Millisecond,
		// The world's servers live in documentation ranges; here they
		// are the internet.
		PublicRanges: testPublic,
	}
	if edit != nil {
		edit(&cfg)
	}
	h, err := NewHost(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func mustParse(t *testing.T, allow ...string) egress.Policy {
	t.Helper()
	p, err := egress.Parse(allow)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNamespaces(t *testing.T) {
	tn := newTestNet(t)
	h := testHost(t, tn)
	ctx := context.Background()

	g1path, g2path := tn.guest(1), tn.guest(2)
	g1, g2 := nsRunner{g1path}, nsRunner{g2path}
	attachStart := time.Now()
	a1, err := h.Attach(ctx, "sb-one", mustParse(t,
		"allowed.test", "multi.test", "rebind.test", "cname.test", "*.wild.test",
		"short.test", "port.test:443", "203.0.113.7", "198.51.100.0/24:443",
		"172.16.5.5", "10.222.0.0/16",
	), WithVethPeer(g1path, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Attach took %v", time.Since(attachStart))
	a2, err := h.Attach(ctx, "sb-two", mustParse(t, "203.0.113.8"), WithVethPeer(g2path, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	configureGuest(t, g1path, a1)
	configureGuest(t, g2path, a2)
	if a1.GuestAddr.String() != "10.222.0.2/30" || a1.Gateway.String() != "10.222.0.1" ||
		a2.GuestAddr.String() != "10.222.0.6/30" || a1.TAP != "cvm-"+Tag("sb-one") {
		t.Fatalf("addresses: %v %v %v %s", a1.GuestAddr, a1.Gateway, a2.GuestAddr, a1.TAP)
	}
	tn.serveHTTP(g2, "0.0.0.0:80", "guest2")

	t.Run("control: the servers are there", func(t *testing.T) {
		for _, a := range []string{"203.0.113.8:80", "203.0.113.52:80", "10.99.0.1:80", "169.254.169.254:80", "100.64.0.9:80"} {
			mustReach(t, tn.hostNS, a)
		}
		mustReach(t, g2, "10.222.0.6:80")
	})
	t.Run("listed addresses", func(t *testing.T) {
		mustReach(t, g1, "203.0.113.7:80")
		mustReach(t, g1, "198.51.100.10:443")
		mustReach(t, g1, "172.16.5.5:80") // private, but listed by address
		mustRefuse(t, g1, "198.51.100.10:80")
	})
	t.Run("unlisted refused fast", func(t *testing.T) {
		mustRefuse(t, g1, "203.0.113.8:80")
		mustReach(t, g2, "203.0.113.8:80") // the other sandbox's policy is its own
		mustRefuse(t, g2, "203.0.113.7:80")
	})
	t.Run("UDP refused fast", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		c, err := g1.dial(ctx, "udp4", "203.0.113.8:9")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		c.Write([]byte("x"))
		_, err = c.Read(make([]byte, 16))
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("UDP to an unlisted address: %v, want connection refused (ICMP port unreachable)", err)
		}
	})
	t.Run("never reachable", func(t *testing.T) {
		for _, a := range []string{
			"169.254.169.254:80", "10.99.0.1:80", "100.64.0.9:80", // metadata, private, CGN
			"192.0.2.2:8080", "10.222.0.1:8080", "10.222.0.5:8080", // the host, its gateways
			"10.222.0.6:80", // the other sandbox, though 10.222.0.0/16 is listed
		} {
			mustRefuse(t, g1, a)
		}
	})
	t.Run("DNS", func(t *testing.T) {
		if rc, _ := lookup(t, g1, a1.DNS, "unlisted.test"); rc != dns.RcodeNameError {
			t.Errorf("unlisted.test: rcode %s, want NXDOMAIN", dns.RcodeToString[rc])
		}
		if rc, addrs := lookupTCP(t, g1, a1.DNS, "www.wild.test"); rc != dns.RcodeSuccess || fmt.Sprint(addrs) != "[203.0.113.62]" {
			t.Errorf("www.wild.test over TCP: %s %v", dns.RcodeToString[rc], addrs)
		}
		if rc, _ := lookup(t, g1, a1.DNS, "wild.test"); rc != dns.RcodeNameError {
			t.Errorf("wild.test (*.wild.test listed): rcode %s, want NXDOMAIN", dns.RcodeToString[rc])
		}
		if rc, addrs := lookup(t, g1, a1.DNS, `x\.wild.test`); rc != dns.RcodeNameError {
			t.Errorf(`x\.wild.test (*.wild.test listed): %s %v, want NXDOMAIN`, dns.RcodeToString[rc], addrs)
		}
		mustRefuse(t, g1, "203.0.113.50:80") // not handed out yet
		if rc, addrs := lookup(t, g1, a1.DNS, "allowed.test"); rc != dns.RcodeSuccess || fmt.Sprint(addrs) != "[203.0.113.50]" {
			t.Fatalf("allowed.test: %s %v", dns.RcodeToString[rc], addrs)
		}
		mustReach(t, g1, "203.0.113.50:80")
		mustReach(t, g1, "203.0.113.50:443")
		mustRefuse(t, g2, "203.0.113.50:80") // opened for sb-one only

		if _, addrs := lookup(t, g1, a1.DNS, "multi.test"); fmt.Sprint(addrs) != "[203.0.113.51]" {
			t.Fatalf("multi.test: %v", addrs)
		}
		mustReach(t, g1, "203.0.113.51:80")
		mustRefuse(t, g1, "203.0.113.52:80") // same "domain", not handed out

		if _, addrs := lookup(t, g1, a1.DNS, "rebind.test"); fmt.Sprint(addrs) != "[203.0.113.50]" {
			t.Errorf("rebind.test: %v, want only the public address", addrs)
		}
		mustRefuse(t, g1, "10.99.0.1:80")
		mustRefuse(t, g1, "169.254.169.254:80")

		if _, addrs := lookup(t, g1, a1.DNS, "cname.test"); fmt.Sprint(addrs) != "[203.0.113.61]" {
			t.Errorf("cname.test: %v", addrs)
		}
		mustReach(t, g1, "203.0.113.61:80")
		if _, addrs := lookup(t, g1, a1.DNS, "www.wild.test"); fmt.Sprint(addrs) != "[203.0.113.62]" {
			t.Errorf("www.wild.test: %v", addrs)
		}
		mustReach(t, g1, "203.0.113.62:80")

		lookup(t, g1, a1.DNS, "port.test")
		mustReach(t, g1, "203.0.113.63:443")
		mustRefuse(t, g1, "203.0.113.63:80")
	})
	t.Run("DNS-opened address closes after its TTL", func(t *testing.T) {
		lookup(t, g1, a1.DNS, "short.test") // TTL 1 s, min clamp 1 s, no grace
		mustReach(t, g1, "203.0.113.60:80")
		time.Sleep(1500 * time.Millisecond)
		mustRefuse(t, g1, "203.0.113.60:80")
	})
	t.Run("counters", func(t *testing.T) {
		al0, dr0 := a1.Counters()
		if al0 == 0 || dr0 == 0 {
			t.Errorf("after the tests above: allowed %d, dropped %d; want both > 0", al0, dr0)
		}
		mustRefuse(t, g1, "203.0.113.8:80")
		al1, dr1 := a1.Counters()
		if dr1 <= dr0 || al1 != al0 {
			t.Errorf("a refused connection: allowed %d->%d, dropped %d->%d", al0, al1, dr0, dr1)
		}
		mustReach(t, g1, "203.0.113.7:80")
		al2, dr2 := a1.Counters()
		if al2 != al1+1 || dr2 != dr1 {
			t.Errorf("an allowed connection: allowed %d->%d, dropped %d->%d", al1, al2, dr1, dr2)
		}
	})
	t.Run("Update", func(t *testing.T) {
		al0, dr0 := a1.Counters()
		if err := a1.Update(mustParse(t, "203.0.113.8", "multi.test:443")); err != nil {
			t.Fatal(err)
		}
		mustReach(t, g1, "203.0.113.8:80")
		mustRefuse(t, g1, "203.0.113.7:80")
		mustRefuse(t, g1, "203.0.113.50:80") // opened by allowed.test, no longer listed
		mustRefuse(t, g1, "203.0.113.51:80") // multi.test now only on 443
		mustReach(t, g1, "203.0.113.51:443")
		if rc, _ := lookup(t, g1, a1.DNS, "allowed.test"); rc != dns.RcodeNameError {
			t.Errorf("allowed.test after Update: %s, want NXDOMAIN", dns.RcodeToString[rc])
		}
		if al, dr := a1.Counters(); al < al0+2 || dr < dr0+3 {
			t.Errorf("counters across Update: allowed %d->%d, dropped %d->%d", al0, al, dr0, dr)
		}
		// Back again: the generations alternate.
		if err := a1.Update(mustParse(t, "203.0.113.7")); err != nil {
			t.Fatal(err)
		}
		mustReach(t, g1, "203.0.113.7:80")
		mustRefuse(t, g1, "203.0.113.8:80")
	})
	t.Run("Close removes everything", func(t *testing.T) {
		tag := Tag("sb-one")
		if err := a1.Close(); err != nil {
			t.Fatal(err)
		}
		if err := a1.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		assertGone(t, tn, tag)
		// The resolver's socket is closed: its address can be bound again.
		_, pc := tn.listen(nsRunner{tn.nsPath(tn.host)}, "udp4", "0.0.0.0:0")
		pc.Close()
		err := tn.hostNS.do(func() error {
			lc := net.ListenConfig{Control: freebind}
			c, err := lc.ListenPacket(context.Background(), "udp4", "10.222.0.1:53")
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			t.Errorf("resolver still bound after Close: %v", err)
		}
		// Base chains and the other sandbox are untouched.
		mustReach(t, g2, "203.0.113.8:80")
		mustRefuse(t, g2, "203.0.113.7:80")
	})
	t.Run("Sweep", func(t *testing.T) {
		g3path := tn.guest(3)
		stale, err := h.Attach(ctx, "sb-stale", mustParse(t, "203.0.113.7"), WithVethPeer(g3path, "eth0"))
		if err != nil {
			t.Fatal(err)
		}
		if stale.GuestAddr.String() != "10.222.0.2/30" {
			t.Errorf("address of sb-one not reused: %v", stale.GuestAddr)
		}
		// A daemon restart: a new Host finds the old one's objects. The
		// old resolver dies with the old process.
		stale.dns.Close()
		a2.dns.Close()
		h2 := testHost(t, tn)
		if err := h2.Sweep([]string{"sb-two"}); err != nil {
			t.Fatal(err)
		}
		assertGone(t, tn, Tag("sb-stale"))
		if out := sh(t, "ip", "-n", tn.host, "link", "show", a2.TAP); !strings.Contains(out, a2.TAP) {
			t.Errorf("live sandbox's link removed: %s", out)
		}
		mustReach(t, g2, "203.0.113.8:80") // its old rules still apply
		// Attach adopts the surviving link and address and replaces the rules.
		b2, err := h2.Attach(ctx, "sb-two", mustParse(t, "203.0.113.7", "allowed.test"))
		if err != nil {
			t.Fatal(err)
		}
		if b2.GuestAddr != a2.GuestAddr {
			t.Errorf("adopted address %v, want %v", b2.GuestAddr, a2.GuestAddr)
		}
		mustReach(t, g2, "203.0.113.7:80")
		mustRefuse(t, g2, "203.0.113.8:80")
		if _, addrs := lookup(t, g2, b2.DNS, "allowed.test"); fmt.Sprint(addrs) != "[203.0.113.50]" {
			t.Errorf("resolver after adoption: %v", addrs)
		}
		// In-process attachments not live are closed by Sweep too.
		if err := h2.Sweep(nil); err != nil {
			t.Fatal(err)
		}
		assertGone(t, tn, Tag("sb-two"))
		if err := stale.Close(); err != nil { // its objects are gone already
			t.Errorf("Close after Sweep: %v", err)
		}
		if err := a2.Close(); err != nil {
			t.Errorf("Close after Sweep: %v", err)
		}
	})
}

// assertGone checks that no link, chain or rule of tag is left in the
// host namespace.
func assertGone(t *testing.T, tn *testNet, tag string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", tn.host, "link", "show", linkPrefix+tag).CombinedOutput(); err == nil {
		t.Errorf("link %s%s still there: %s", linkPrefix, tag, out)
	}
	for _, table := range []string{"filter", "nat"} {
		out := sh(t, "ip", "netns", "exec", tn.host, "iptables", "-t", table, "-S")
		if strings.Contains(out, tag) {
			t.Errorf("%s table still mentions %s:\n%s", table, tag, out)
		}
		if !strings.Contains(out, "CELLVM-") {
			t.Errorf("%s table lost the base chains:\n%s", table, out)
		}
	}
}

func TestNamespacesTAP(t *testing.T) {
	tn := newTestNet(t)
	h := testHost(t, tn)
	a, err := h.Attach(context.Background(), "sb-tap", mustParse(t, "203.0.113.7"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	err = tn.hostNS.do(func() error {
		l, err := netlink.LinkByName(a.TAP)
		if err != nil {
			return err
		}
		tap, ok := l.(*netlink.Tuntap)
		if !ok || tap.Mode != netlink.TUNTAP_MODE_TAP || tap.NonPersist {
			return fmt.Errorf("link %s is %T %+v, want a persistent TAP", a.TAP, l, l)
		}
		if l.Attrs().Alias != "cellvm sandbox sb-tap" {
			return fmt.Errorf("alias %q", l.Attrs().Alias)
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
		if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.222.0.1/30" {
			return fmt.Errorf("addresses %v, %v", addrs, err)
		}
		// The VMM opens it as its virtio-net backend.
		f, err := OpenTAP(a.TAP)
		if err != nil {
			return fmt.Errorf("OpenTAP: %w", err)
		}
		return f.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
	// The resolver holds the gateway's port 53 (no guest is there to ask
	// it: it answers only the guest's address).
	err = tn.hostNS.do(func() error {
		lc := net.ListenConfig{Control: freebind}
		c, err := lc.ListenPacket(context.Background(), "udp4", netip.AddrPortFrom(a.DNS, 53).String())
		if err == nil {
			c.Close()
			return errors.New("the gateway's port 53 is free: no resolver there")
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if !strings.Contains(a.KernelArgs(), "cellvm.ip=10.222.0.2/30 cellvm.gw=10.222.0.1 cellvm.dns=10.222.0.1") {
		t.Errorf("KernelArgs %q", a.KernelArgs())
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	assertGone(t, tn, Tag("sb-tap"))
}
