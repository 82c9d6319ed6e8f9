// Package dnsproxy is the DNS resolver a sandbox's guest talks to. It is
// how names in an egress policy become addresses the firewall lets through:
// it answers only names the policy allows (NXDOMAIN for the rest, so a
// refused name fails at once), forwards allowed ones to the host's real
// resolver, and hands the addresses it got to its caller to allow before
// the guest sees them. An address the guest did not get from here (a
// hard-coded IP of an allowed domain, another record of the same name) is
// therefore never opened.
//
// Only A queries are forwarded: the guest link is IPv4 only, and other
// types (HTTPS/SVCB with address hints, TXT) would either hand out
// addresses this package does not pin or carry data nobody asked for. For
// allowed names they get an empty answer.
//
// It answers one address, its guest's: a query from any other source gets
// no reply at all, so that a spoofed query cannot turn the resolver into a
// channel towards the host that owns the claimed address (another
// sandbox, the LAN). The host's rules drop such packets first; this is
// the second check.
//
// Queries come from the guest and are hostile: one question per message,
// class IN, bounded concurrency towards the upstream, bounded TCP
// connections; miekg/dns bounds the message parsing.
package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellvm/cellvm/sandbox/egress/dnsname"
	"github.com/miekg/dns"
)

// Defaults for Config's zero fields.
const (
	DefaultMinTTL      = 30 * time.Second
	DefaultMaxTTL      = 5 * time.Minute
	DefaultTimeout     = 2 * time.Second
	DefaultMaxInflight = 32
	DefaultMaxTCPConns = 16
	// maxChain bounds the CNAME chain followed in an upstream answer.
	maxChain = 8
	// ednsSize is the UDP payload size offered upstream and to the guest.
	ednsSize = 1232
)

// Config says what to answer and where to ask.
type Config struct {
	// Allowed reports whether name (a host name: lower case, labels of
	// letters, digits, '-' and '_', no trailing dot) may be resolved. It
	// must be safe for concurrent use.
	Allowed func(name string) bool
	// Admit is called with the IPv4 addresses the upstream returned for an
	// allowed name and the TTL the guest will be told. It returns those
	// the guest may see, which must be reachable by the time it returns.
	// An error makes the answer SERVFAIL. It must be safe for concurrent
	// use.
	Admit func(name string, addrs []netip.Addr, ttl time.Duration) ([]netip.Addr, error)
	// Client is the only source address answered (the guest's).
	Client netip.Addr
	// Upstreams are "ip:port" resolvers, tried in order.
	Upstreams []string
	// Dial opens connections to the upstreams; nil uses a net.Dialer. It
	// lets the caller open them in another network namespace.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// MinTTL and MaxTTL clamp the TTL given to the guest and to Admit.
	MinTTL, MaxTTL time.Duration
	// Timeout bounds one upstream exchange.
	Timeout time.Duration
	// MaxInflight bounds concurrent upstream queries; more get SERVFAIL.
	MaxInflight int
	// MaxTCPConns bounds the guest's concurrent TCP connections.
	MaxTCPConns int
	Log         *slog.Logger
}

// Stats count the queries answered.
type Stats struct {
	Forwarded uint64 // allowed A queries answered from the upstream
	Refused   uint64 // names not allowed (NXDOMAIN)
	Failed    uint64 // SERVFAIL: upstream unreachable, overload, Admit error
	Ignored   uint64 // queries from another source than Client: no reply
}

// Server serves one guest on a UDP socket and a TCP listener.
type Server struct {
	cfg      Config
	inflight chan struct{}
	udp, tcp *dns.Server
	wg       sync.WaitGroup
	close    sync.Once
	closeErr error

	forwarded, refused, failed, ignored atomic.Uint64

	namesMu sync.Mutex
	names   map[string]*nameCount // at most maxNames, then otherNames
}

type nameCount struct{ forwarded, refused uint64 }

// Per-name counts are bounded: the guest chooses the names.
const (
	maxNames   = 256
	otherNames = "(other names)"
	notAHost   = "(not a host name)"
)

// countName adds one answer for name to its count.
func (s *Server) countName(name string, forwarded bool) {
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	if s.names == nil {
		s.names = map[string]*nameCount{}
	}
	c := s.names[name]
	if c == nil {
		if len(s.names) >= maxNames-1 {
			name = otherNames
		}
		if c = s.names[name]; c == nil {
			c = &nameCount{}
			s.names[name] = c
		}
	}
	if forwarded {
		c.forwarded++
	} else {
		c.refused++
	}
}

// NameCount is the answers for one name.
type NameCount struct {
	Name      string
	Forwarded uint64 // answered from the upstream (an address or NXDOMAIN)
	Refused   uint64 // not allowed
}

// Names returns the answers per name asked, sorted by name; at most 256
// names, the rest counted under "(other names)", and a query that is no
// host name under "(not a host name)".
func (s *Server) Names() []NameCount {
	s.namesMu.Lock()
	defer s.namesMu.Unlock()
	out := make([]NameCount, 0, len(s.names))
	for n, c := range s.names {
		out = append(out, NameCount{Name: n, Forwarded: c.forwarded, Refused: c.refused})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Serve starts answering on pc and l (either may be nil) and returns at
// once. Close stops it and closes them.
func Serve(cfg Config, pc net.PacketConn, l net.Listener) (*Server, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	cfg = s.cfg
	h := dns.HandlerFunc(s.handle)
	if pc != nil {
		s.udp = &dns.Server{PacketConn: pc, Handler: h, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout}
		s.start(s.udp)
	}
	if l != nil {
		s.tcp = &dns.Server{
			Listener: newLimitListener(l, cfg.MaxTCPConns), Handler: h,
			ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout, MaxTCPQueries: 64,
		}
		s.start(s.tcp)
	}
	return s, nil
}

// newServer checks cfg and fills in its defaults.
func newServer(cfg Config) (*Server, error) {
	if cfg.Allowed == nil || cfg.Admit == nil {
		return nil, errors.New("dnsproxy: Allowed and Admit are required")
	}
	if !cfg.Client.IsValid() {
		return nil, errors.New("dnsproxy: no client address")
	}
	if len(cfg.Upstreams) == 0 {
		return nil, errors.New("dnsproxy: no upstream resolver")
	}
	for _, u := range cfg.Upstreams {
		if _, err := netip.ParseAddrPort(u); err != nil {
			return nil, fmt.Errorf("dnsproxy: upstream %q: want ip:port: %w", u, err)
		}
	}
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = DefaultMinTTL
	}
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MaxTTL < cfg.MinTTL {
		return nil, fmt.Errorf("dnsproxy: max TTL %v below min TTL %v", cfg.MaxTTL, cfg.MinTTL)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = DefaultMaxInflight
	}
	if cfg.MaxTCPConns <= 0 {
		cfg.MaxTCPConns = DefaultMaxTCPConns
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	return &Server{cfg: cfg, inflight: make(chan struct{}, cfg.MaxInflight)}, nil
}

func (s *Server) start(srv *dns.Server) {
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := srv.ActivateAndServe(); err != nil {
			s.cfg.Log.Debug("dns server stopped", "err", err)
		}
	}()
	// Shutdown before the server has started is refused by miekg/dns; wait.
	select {
	case <-started:
	case <-time.After(time.Second):
	}
}

// Close stops serving and closes the sockets. Later calls return the
// first call's result.
func (s *Server) Close() error {
	s.close.Do(func() { s.closeErr = s.shutdown() })
	return s.closeErr
}

func (s *Server) shutdown() error {
	var errs []error
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		if srv == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := srv.ShutdownContext(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	s.wg.Wait()
	return errors.Join(errs...)
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	return Stats{Forwarded: s.forwarded.Load(), Refused: s.refused.Load(), Failed: s.failed.Load(), Ignored: s.ignored.Load()}
}

func (s *Server) handle(w dns.ResponseWriter, req *dns.Msg) {
	if !fromAddr(w.RemoteAddr(), s.cfg.Client) {
		s.ignored.Add(1)
		if _, udp := w.LocalAddr().(*net.UDPAddr); !udp {
			w.Close()
		}
		return
	}
	resp := s.answer(req)
	if _, udp := w.LocalAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(int(min(opt.UDPSize(), ednsSize)), dns.MinMsgSize)
		}
		resp.Truncate(size)
	}
	if err := w.WriteMsg(resp); err != nil {
		s.cfg.Log.Debug("dns reply", "err", err)
	}
}

// fromAddr reports whether a is an address of ip's (any port).
func fromAddr(a net.Addr, ip netip.Addr) bool {
	var got net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		got = a.IP
	case *net.TCPAddr:
		got = a.IP
	default:
		return false
	}
	g, ok := netip.AddrFromSlice(got)
	return ok && g.Unmap() == ip.Unmap()
}

// answer builds the reply to one guest query.
func (s *Server) answer(req *dns.Msg) *dns.Msg {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	resp.Authoritative = false
	if req.IsEdns0() != nil {
		resp.SetEdns0(ednsSize, false)
	}
	if req.Opcode != dns.OpcodeQuery {
		resp.Rcode = dns.RcodeNotImplemented
		return resp
	}
	if len(req.Question) != 1 {
		resp.Rcode = dns.RcodeFormatError
		return resp
	}
	q := req.Question[0]
	if q.Qclass != dns.ClassINET {
		resp.Rcode = dns.RcodeRefused
		return resp
	}
	// Names are read as labels: one with a dot or another byte no host
	// name has inside a label (x\.example.com) is no name a policy
	// lists, and must not reach Allowed as a string that looks like one.
	name, ok := dnsname.Host(q.Name)
	if !ok || !s.cfg.Allowed(name) {
		s.refused.Add(1)
		if !ok {
			name = notAHost
		}
		s.countName(name, false)
		resp.Rcode = dns.RcodeNameError
		return resp
	}
	if q.Qtype != dns.TypeA {
		return resp // NOERROR, no data
	}
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		s.failed.Add(1)
		resp.Rcode = dns.RcodeServerFailure
		return resp
	}
	up, err := s.forward(name)
	if err != nil {
		s.cfg.Log.Warn("dns upstream", "name", name, "err", err)
		s.failed.Add(1)
		resp.Rcode = dns.RcodeServerFailure
		return resp
	}
	if up.Rcode != dns.RcodeSuccess {
		resp.Rcode = up.Rcode
		if up.Rcode == dns.RcodeNameError {
			s.forwarded.Add(1)
			s.countName(name, true)
		} else {
			s.failed.Add(1)
		}
		return resp
	}
	cnames, addrs, ttl := chain(name, up.Answer)
	ttl = min(max(ttl, s.cfg.MinTTL), s.cfg.MaxTTL)
	kept, err := s.cfg.Admit(name, addrs, ttl)
	if err != nil {
		s.cfg.Log.Warn("dns admit", "name", name, "err", err)
		s.failed.Add(1)
		resp.Rcode = dns.RcodeServerFailure
		return resp
	}
	secs := uint32(ttl / time.Second)
	for _, c := range cnames {
		c.Hdr.Ttl = secs
		resp.Answer = append(resp.Answer, c)
	}
	for _, a := range kept {
		resp.Answer = append(resp.Answer, &dns.A{
			Hdr: dns.RR_Header{Name: lastName(q.Name, cnames), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: secs},
			A:   a.AsSlice(),
		})
	}
	s.forwarded.Add(1)
	s.countName(name, true)
	return resp
}

// chain follows the CNAME chain from name through an upstream answer and
// returns its CNAMEs, the IPv4 addresses of its last name and the least
// TTL on the way. Records off the chain are ignored: an upstream cannot
// make the guest see, or the firewall open, addresses of other names.
func chain(name string, rrs []dns.RR) ([]*dns.CNAME, []netip.Addr, time.Duration) {
	cur := dns.Fqdn(name)
	var cnames []*dns.CNAME
	ttl := uint32(1<<31 - 1)
	for hop := 0; hop < maxChain; hop++ {
		var next *dns.CNAME
		for _, rr := range rrs {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, cur) {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		cnames = append(cnames, &dns.CNAME{Hdr: next.Hdr, Target: strings.ToLower(next.Target)})
		ttl = min(ttl, next.Hdr.Ttl)
		cur = next.Target
	}
	var addrs []netip.Addr
	for _, rr := range rrs {
		a, ok := rr.(*dns.A)
		if !ok || !strings.EqualFold(a.Hdr.Name, cur) {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.A.To4())
		if !ok {
			continue
		}
		addrs = append(addrs, ip)
		ttl = min(ttl, a.Hdr.Ttl)
	}
	if len(addrs) == 0 {
		ttl = 0
	}
	return cnames, addrs, time.Duration(ttl) * time.Second
}

func lastName(qname string, cnames []*dns.CNAME) string {
	if len(cnames) == 0 {
		return qname
	}
	return cnames[len(cnames)-1].Target
}

// forward asks the upstreams for name's A records: UDP first, TCP when
// the answer is truncated; the first upstream that answers NOERROR or
// NXDOMAIN wins.
func (s *Server) forward(name string) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	q.RecursionDesired = true
	q.SetEdns0(ednsSize, false)
	var errs []error
	for _, up := range s.cfg.Upstreams {
		r, err := s.exchange("udp", up, q)
		if err == nil && r.Truncated {
			r, err = s.exchange("tcp", up, q)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", up, err))
			continue
		}
		if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
			errs = append(errs, fmt.Errorf("%s: %s", up, dns.RcodeToString[r.Rcode]))
			continue
		}
		return r, nil
	}
	return nil, errors.Join(errs...)
}

func (s *Server) exchange(network, addr string, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	c, err := s.cfg.Dial(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	cl := &dns.Client{Net: network, Timeout: s.cfg.Timeout, UDPSize: ednsSize}
	r, _, err := cl.ExchangeWithConnContext(ctx, q.Copy(), &dns.Conn{Conn: c, UDPSize: ednsSize})
	if err != nil {
		return nil, err
	}
	if len(r.Question) != 1 || !strings.EqualFold(r.Question[0].Name, q.Question[0].Name) || r.Question[0].Qtype != dns.TypeA {
		return nil, errors.New("answer to another question")
	}
	return r, nil
}
