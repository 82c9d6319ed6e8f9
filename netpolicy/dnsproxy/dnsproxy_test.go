package dnsproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// fakeUpstream answers over net.Pipe, so no socket is opened.
type fakeUpstream struct {
	mu      sync.Mutex
	answers map[string][]string // qname -> RRs in zone-file form; absent: NXDOMAIN
	rcode   int
	asked   []string
	block   chan struct{} // if not nil, answers wait for it
}

func (f *fakeUpstream) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, s := net.Pipe()
	go func() {
		defer s.Close()
		co := &dns.Conn{Conn: s}
		q, err := co.ReadMsg()
		if err != nil {
			return
		}
		if f.block != nil {
			<-f.block
		}
		f.mu.Lock()
		f.asked = append(f.asked, network+" "+q.Question[0].Name)
		rrs, ok := f.answers[q.Question[0].Name]
		rcode := f.rcode
		f.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(q)
		if !ok {
			m.Rcode = dns.RcodeNameError
		}
		if rcode != 0 {
			m.Rcode = rcode
		}
		for _, r := range rrs {
			rr, err := dns.NewRR(r)
			if err != nil {
				panic(err)
			}
			m.Answer = append(m.Answer, rr)
		}
		co.WriteMsg(m)
	}()
	return c, nil
}

type admitted struct {
	mu    sync.Mutex
	names []string
	ttls  []time.Duration
}

func newTestServer(t *testing.T, up *fakeUpstream, allowed ...string) (*Server, *admitted) {
	t.Helper()
	ad := &admitted{}
	s, err := newServer(Config{
		Allowed: func(name string) bool {
			for _, a := range allowed {
				if name == a {
					return true
				}
			}
			return false
		},
		Admit: func(name string, addrs []netip.Addr, ttl time.Duration) ([]netip.Addr, error) {
			ad.mu.Lock()
			defer ad.mu.Unlock()
			ad.names = append(ad.names, fmt.Sprintf("%s %v", name, addrs))
			ad.ttls = append(ad.ttls, ttl)
			var kept []netip.Addr
			for _, a := range addrs {
				if !a.IsPrivate() {
					kept = append(kept, a)
				}
			}
			return kept, nil
		},
		Client:      netip.MustParseAddr("10.222.0.2"),
		Upstreams:   []string{"192.0.2.53:53"},
		Dial:        up.dial,
		MinTTL:      10 * time.Second,
		MaxTTL:      100 * time.Second,
		MaxInflight: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, ad
}

func query(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	return m
}

func answerStrings(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	return out
}

func TestAnswerAllowed(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{
		"pypi.org.": {
			"pypi.org. 5 IN CNAME edge.cdn.test.",
			"edge.cdn.test. 3600 IN A 203.0.113.9",
			"edge.cdn.test. 3600 IN A 10.0.0.9",  // rebinding: Admit withholds it
			"other.test. 3600 IN A 203.0.113.66", // off the chain: ignored
		},
	}}
	s, ad := newTestServer(t, up, "pypi.org")
	r := s.answer(query("PyPI.org", dns.TypeA))
	if r.Rcode != dns.RcodeSuccess {
		t.Fatalf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	want := []string{
		"pypi.org. 10 IN CNAME edge.cdn.test.",
		"edge.cdn.test. 10 IN A 203.0.113.9",
	}
	if got := answerStrings(r); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("answer %q, want %q", got, want)
	}
	if fmt.Sprint(ad.names) != "[pypi.org [203.0.113.9 10.0.0.9]]" || ad.ttls[0] != 10*time.Second {
		t.Errorf("Admit got %v %v; want the chain's addresses and the TTL clamped up to 10s", ad.names, ad.ttls)
	}
	if s.Stats().Forwarded != 1 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestAnswerTTLClampedDown(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{"a.test.": {"a.test. 86400 IN A 203.0.113.1"}}}
	s, ad := newTestServer(t, up, "a.test")
	r := s.answer(query("a.test", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl != 100 || ad.ttls[0] != 100*time.Second {
		t.Errorf("answer %v, admit TTL %v; want 100 s", r.Answer, ad.ttls)
	}
}

func TestAnswerRefused(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{"evil.test.": {"evil.test. 60 IN A 203.0.113.1"}}}
	s, ad := newTestServer(t, up, "pypi.org")
	for _, q := range []*dns.Msg{query("evil.test", dns.TypeA), query("evil.test", dns.TypeAAAA), query("www.pypi.org", dns.TypeA)} {
		r := s.answer(q)
		if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
			t.Errorf("%v: rcode %s %v, want NXDOMAIN", q.Question[0], dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if len(up.asked) != 0 || len(ad.names) != 0 {
		t.Errorf("refused names reached the upstream %v or Admit %v", up.asked, ad.names)
	}
	if s.Stats().Refused != 3 {
		t.Errorf("stats %+v", s.Stats())
	}
}

func TestAnswerOtherTypesEmpty(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{}}
	s, _ := newTestServer(t, up, "pypi.org")
	for _, qt := range []uint16{dns.TypeAAAA, dns.TypeTXT, dns.TypeHTTPS, dns.TypeANY} {
		r := s.answer(query("pypi.org", qt))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
			t.Errorf("type %s: %s %v, want NOERROR and no data", dns.TypeToString[qt], dns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if len(up.asked) != 0 {
		t.Errorf("non-A queries reached the upstream: %v", up.asked)
	}
}

func TestAnswerMalformed(t *testing.T) {
	s, _ := newTestServer(t, &fakeUpstream{}, "pypi.org")
	two := query("pypi.org", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	if r := s.answer(two); r.Rcode != dns.RcodeFormatError {
		t.Errorf("two questions: %s", dns.RcodeToString[r.Rcode])
	}
	none := query("pypi.org", dns.TypeA)
	none.Question = nil
	if r := s.answer(none); r.Rcode != dns.RcodeFormatError {
		t.Errorf("no question: %s", dns.RcodeToString[r.Rcode])
	}
	chaos := query("pypi.org", dns.TypeA)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	if r := s.answer(chaos); r.Rcode != dns.RcodeRefused {
		t.Errorf("class CH: %s", dns.RcodeToString[r.Rcode])
	}
	upd := query("pypi.org", dns.TypeA)
	upd.Opcode = dns.OpcodeUpdate
	if r := s.answer(upd); r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("UPDATE: %s", dns.RcodeToString[r.Rcode])
	}
}

func TestAnswerUpstreamErrors(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{}}
	s, ad := newTestServer(t, up, "gone.test", "broken.test")
	if r := s.answer(query("gone.test", dns.TypeA)); r.Rcode != dns.RcodeNameError {
		t.Errorf("upstream NXDOMAIN: %s", dns.RcodeToString[r.Rcode])
	}
	up.rcode = dns.RcodeServerFailure
	if r := s.answer(query("broken.test", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("upstream SERVFAIL: %s", dns.RcodeToString[r.Rcode])
	}
	if len(ad.names) != 0 {
		t.Errorf("Admit called without addresses: %v", ad.names)
	}
}

func TestAnswerInflightBound(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{"a.test.": {"a.test. 60 IN A 203.0.113.1"}}, block: make(chan struct{})}
	s, _ := newTestServer(t, up, "a.test") // MaxInflight 1
	first := make(chan *dns.Msg)
	go func() { first <- s.answer(query("a.test", dns.TypeA)) }()
	deadline := time.Now().Add(2 * time.Second)
	for len(s.inflight) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if r := s.answer(query("a.test", dns.TypeA)); r.Rcode != dns.RcodeServerFailure {
		t.Errorf("second concurrent query: %s, want SERVFAIL", dns.RcodeToString[r.Rcode])
	}
	close(up.block)
	if r := <-first; r.Rcode != dns.RcodeSuccess {
		t.Errorf("first query: %s", dns.RcodeToString[r.Rcode])
	}
}

func TestServeValidates(t *testing.T) {
	ok := Config{
		Allowed:   func(string) bool { return true },
		Admit:     func(string, []netip.Addr, time.Duration) ([]netip.Addr, error) { return nil, nil },
		Client:    netip.MustParseAddr("10.222.0.2"),
		Upstreams: []string{"192.0.2.53:53"},
	}
	bad := []func(c *Config){
		func(c *Config) { c.Allowed = nil },
		func(c *Config) { c.Admit = nil },
		func(c *Config) { c.Upstreams = nil },
		func(c *Config) { c.Client = netip.Addr{} },
		func(c *Config) { c.Upstreams = []string{"resolver.example"} },
		func(c *Config) { c.MinTTL, c.MaxTTL = time.Minute, time.Second },
	}
	for i, f := range bad {
		c := ok
		f(&c)
		if _, err := Serve(c, nil, nil); err == nil {
			t.Errorf("case %d: Serve accepted a bad config", i)
		}
	}
	s, err := Serve(ok, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Error(err)
	}
}

// recorder is a ResponseWriter that records what the server does.
type recorder struct {
	local, remote net.Addr
	written       []*dns.Msg
	closed        bool
}

func (r *recorder) LocalAddr() net.Addr         { return r.local }
func (r *recorder) RemoteAddr() net.Addr        { return r.remote }
func (r *recorder) WriteMsg(m *dns.Msg) error   { r.written = append(r.written, m); return nil }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) Close() error                { r.closed = true; return nil }
func (r *recorder) TsigStatus() error           { return nil }
func (r *recorder) TsigTimersOnly(bool)         {}
func (r *recorder) Hijack()                     {}

// TestAnswersOnlyItsClient: a query whose source is not the guest's
// address gets no reply (not even NXDOMAIN, which would echo the name to
// whoever owns that address); a TCP one loses its connection.
func TestAnswersOnlyItsClient(t *testing.T) {
	s, _ := newTestServer(t, &fakeUpstream{}, "pypi.org")
	gw := net.ParseIP("10.222.0.1")
	for _, c := range []struct {
		local, remote net.Addr
		answered      bool
	}{
		{&net.UDPAddr{IP: gw, Port: 53}, &net.UDPAddr{IP: net.ParseIP("10.222.0.2"), Port: 5353}, true},
		{&net.TCPAddr{IP: gw, Port: 53}, &net.TCPAddr{IP: net.ParseIP("10.222.0.2"), Port: 40000}, true},
		{&net.UDPAddr{IP: gw, Port: 53}, &net.UDPAddr{IP: net.ParseIP("::ffff:10.222.0.2"), Port: 5353}, true},
		{&net.UDPAddr{IP: gw, Port: 53}, &net.UDPAddr{IP: net.ParseIP("10.222.0.6"), Port: 5353}, false}, // another sandbox
		{&net.UDPAddr{IP: gw, Port: 53}, &net.UDPAddr{IP: net.ParseIP("192.0.2.9"), Port: 53}, false},    // a LAN host
		{&net.TCPAddr{IP: gw, Port: 53}, &net.TCPAddr{IP: net.ParseIP("10.222.0.6"), Port: 40000}, false},
	} {
		w := &recorder{local: c.local, remote: c.remote}
		s.handle(w, query("not-listed.example", dns.TypeA))
		if got := len(w.written) == 1; got != c.answered {
			t.Errorf("query from %v: answered %v, want %v", c.remote, got, c.answered)
		}
		if _, tcp := c.local.(*net.TCPAddr); tcp && !c.answered && !w.closed {
			t.Errorf("TCP query from %v: connection kept open", c.remote)
		}
	}
	if st := s.Stats(); st.Ignored != 3 || st.Refused != 3 {
		t.Errorf("stats %+v, want 3 ignored and 3 refused", st)
	}
}

// TestNamesAreLabels: the proxy hands Allowed and the upstream host names
// only, read label by label from the query. With a policy check as naive
// as a string suffix, "x\.example.com" (a name under com) still does not
// pass for a name under example.com.
func TestNamesAreLabels(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{"www.example.com.": {"www.example.com. 60 IN A 203.0.113.1"}}}
	var asked []string
	s, err := newServer(Config{
		Allowed: func(name string) bool {
			asked = append(asked, name)
			return strings.HasSuffix(name, ".example.com")
		},
		Admit: func(name string, addrs []netip.Addr, ttl time.Duration) ([]netip.Addr, error) {
			return addrs, nil
		},
		Client:    netip.MustParseAddr("10.222.0.2"),
		Upstreams: []string{"192.0.2.53:53"},
		Dial:      up.dial,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		qname   string
		rcode   int
		allowed string // what Allowed was asked; "" if nothing
	}{
		{`x\.example.com.`, dns.RcodeNameError, ""},
		{`evil\.example.com.`, dns.RcodeNameError, ""},
		{`www\046example.com.`, dns.RcodeNameError, ""}, // \046 is a dot, in the label
		{`a\032b.example.com.`, dns.RcodeNameError, ""},
		{"WWW.Example.COM.", dns.RcodeSuccess, "www.example.com"},
		{`\119ww.example.com.`, dns.RcodeSuccess, "www.example.com"}, // \119 is "w"
		{"example.com.", dns.RcodeNameError, "example.com"},
	} {
		asked = nil
		up.asked = nil
		m := new(dns.Msg)
		m.Question = []dns.Question{{Name: c.qname, Qtype: dns.TypeA, Qclass: dns.ClassINET}}
		r := s.answer(m)
		if r.Rcode != c.rcode {
			t.Errorf("%s: %s, want %s", c.qname, dns.RcodeToString[r.Rcode], dns.RcodeToString[c.rcode])
		}
		if got := strings.Join(asked, ","); got != c.allowed {
			t.Errorf("%s: Allowed asked %q, want %q", c.qname, got, c.allowed)
		}
		if c.rcode == dns.RcodeSuccess && fmt.Sprint(up.asked) != "[udp www.example.com.]" {
			t.Errorf("%s: upstream asked %v, want the host name", c.qname, up.asked)
		}
		if c.rcode != dns.RcodeSuccess && len(up.asked) != 0 {
			t.Errorf("%s: reached the upstream: %v", c.qname, up.asked)
		}
	}
}

// TestNamesAreCountedAndBounded: the answers per name, a query that is no
// host name under its own entry, and at most maxNames entries however
// many names a guest asks for.
func TestNamesAreCountedAndBounded(t *testing.T) {
	up := &fakeUpstream{answers: map[string][]string{"a.test.": {"a.test. 60 IN A 203.0.113.1"}}}
	s, _ := newTestServer(t, up, "a.test")
	s.answer(query("a.test", dns.TypeA))
	s.answer(query("A.test", dns.TypeA))
	s.answer(query("evil.test", dns.TypeA))
	s.answer(query("x\\.evil.test", dns.TypeA))
	got := fmt.Sprint(s.Names())
	if got != "[{(not a host name) 0 1} {a.test 2 0} {evil.test 0 1}]" {
		t.Errorf("names %s", got)
	}
	for i := 0; i < 3*maxNames; i++ {
		s.answer(query(fmt.Sprintf("n%d.evil.test", i), dns.TypeA))
	}
	names := s.Names()
	if len(names) != maxNames {
		t.Fatalf("%d names kept, want %d", len(names), maxNames)
	}
	var other uint64
	for _, n := range names {
		if n.Name == otherNames {
			other = n.Refused
		}
	}
	if other == 0 {
		t.Errorf("no %q entry after %d names", otherNames, 3*maxNames)
	}
}
