package api

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tlsGet sends GET /v1/sandboxes through srv with token (none when "")
// and X-Forwarded-For xff (none when ""), and returns the status.
func tlsGet(t *testing.T, srv *httptest.Server, token, xff string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/v1/sandboxes", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestFailuresAreLimitedButNeverLockOutAValidToken(t *testing.T) {
	srv, _, _ := tlsEnv(t)
	if s := tlsGet(t, srv, testToken, "").StatusCode; s != http.StatusOK {
		t.Fatalf("with the token: %d", s)
	}
	for i := 0; i < 40; i++ {
		resp := tlsGet(t, srv, fmt.Sprintf("guess-%020d", i), "")
		want := http.StatusUnauthorized
		if i >= failBurst {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Fatalf("guess %d: %d, want %d", i, resp.StatusCode, want)
		}
		if want == http.StatusTooManyRequests {
			if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > int(failEvery/time.Second)+1 {
				t.Fatalf("guess %d: Retry-After %q", i, resp.Header.Get("Retry-After"))
			}
		}
		// The token holder at the same address is served throughout.
		if i%10 == 9 {
			if s := tlsGet(t, srv, testToken, "").StatusCode; s != http.StatusOK {
				t.Fatalf("the right token after %d failures from its address: %d, want 200", i+1, s)
			}
		}
	}
	// A request without any token counts as a failure too.
	if s := tlsGet(t, srv, "", "").StatusCode; s != http.StatusTooManyRequests {
		t.Errorf("no token after the burst: %d, want 429", s)
	}
	if s := tlsGet(t, srv, testToken, "").StatusCode; s != http.StatusOK {
		t.Errorf("the right token after 40 failures: %d, want 200", s)
	}
}

// gateOnly is RequireToken over a handler that answers 200, with the
// gate's table and clock reachable.
func gateOnly(t *testing.T, opts ...GateOption) *tokenGate {
	t.Helper()
	tok, err := LoadTokens(writeTokens(t, testToken+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	return RequireToken(h, tok, nil, opts...).(*tokenGate)
}

func (g *tokenGate) status(remote, token, xff string) int {
	r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
	r.RemoteAddr = remote
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	if xff != "" {
		r.Header.Set("X-Forwarded-For", xff)
	}
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	return w.Code
}

func v4(i int) string { return fmt.Sprintf("198.%d.%d.%d:4000", 18+i>>16&1, i>>8&255, i&255) }
func v6(i int) string { return fmt.Sprintf("[2001:db8:%x:%x::1]:4000", i>>16, i&0xffff) }

func TestManyFailingClientsCannotLockOutAValidToken(t *testing.T) {
	for _, c := range []struct {
		name string
		addr func(int) string
	}{{"ipv4", v4}, {"ipv6", v6}} {
		t.Run(c.name, func(t *testing.T) {
			g := gateOnly(t)
			// 5000 distinct clients, each failing past its burst.
			for i := 0; i < 5000; i++ {
				for j := 0; j <= failBurst; j++ {
					g.status(c.addr(i), "wrong-token-0123456789", "")
				}
				if n := g.fails.len(); n > maxFailClients {
					t.Fatalf("after %d clients the table holds %d keys, over %d", i+1, n, maxFailClients)
				}
			}
			if n := g.fails.len(); n != maxFailClients {
				t.Errorf("the table holds %d keys, want it full at %d", n, maxFailClients)
			}
			// The latest clients are still limited: the table works.
			if s := g.status(c.addr(4999), "", ""); s != http.StatusTooManyRequests {
				t.Errorf("a client past its burst: %d, want 429", s)
			}
			// A valid token is served from the failing addresses and from
			// new ones alike.
			for _, i := range []int{0, 1, 2500, 4999, 6000} {
				if s := g.status(c.addr(i), testToken, ""); s != http.StatusOK {
					t.Errorf("the right token from client %d: %d, want 200", i, s)
				}
			}
		})
	}
	// 5000 failures from one address.
	g := gateOnly(t)
	for i := 0; i < 5000; i++ {
		g.status("192.0.2.7:1234", "", "")
	}
	if s := g.status("192.0.2.7:1234", testToken, ""); s != http.StatusOK {
		t.Errorf("the right token after 5000 failures from its address: %d, want 200", s)
	}
	if g.fails.len() != 1 {
		t.Errorf("one address holds %d keys", g.fails.len())
	}
}

func TestIPv6ClientsAreLimitedPer64(t *testing.T) {
	g := gateOnly(t)
	for i := 0; i < failBurst; i++ {
		addr := fmt.Sprintf("[2001:db8:1:2:%x::9]:80", i+1)
		if s := g.status(addr, "", ""); s != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i, s)
		}
	}
	if s := g.status("[2001:db8:1:2:ffff::1]:80", "", ""); s != http.StatusTooManyRequests {
		t.Errorf("a new address in the same /64: %d, want 429", s)
	}
	if s := g.status("[2001:db8:1:3::1]:80", "", ""); s != http.StatusUnauthorized {
		t.Errorf("the next /64: %d, want 401", s)
	}
	// An IPv4-mapped address is its IPv4 address.
	for i := 0; i < failBurst; i++ {
		g.status("192.0.2.1:80", "", "")
	}
	if s := g.status("[::ffff:192.0.2.1]:80", "", ""); s != http.StatusTooManyRequests {
		t.Errorf("the IPv4-mapped form of a limited address: %d, want 429", s)
	}
}

func TestFailTableRefillsAndEvictsTheLeastRecent(t *testing.T) {
	tb := newFailTable(2, time.Second, 3)
	now := time.Unix(1000, 0)
	key := func(s string) netip.Prefix { return failKey(netip.MustParseAddr(s)) }
	for i := 0; i < 2; i++ {
		if ok, _ := tb.spend(key("192.0.2.1"), now); !ok {
			t.Fatalf("spend %d refused", i)
		}
	}
	ok, retry := tb.spend(key("192.0.2.1"), now)
	if ok || retry != time.Second {
		t.Fatalf("past the burst: %v %v, want refused for 1s", ok, retry)
	}
	// Half a second later: still nothing; a second later: one more.
	if ok, retry := tb.spend(key("192.0.2.1"), now.Add(500*time.Millisecond)); ok || retry != 500*time.Millisecond {
		t.Fatalf("after 0.5 s: %v %v", ok, retry)
	}
	if ok, _ := tb.spend(key("192.0.2.1"), now.Add(1500*time.Millisecond)); !ok {
		t.Fatal("no refill after a second")
	}
	// Two more keys fill the table; touching .1 makes .2 the oldest,
	// which the fourth key evicts.
	tb.spend(key("192.0.2.2"), now)
	tb.spend(key("192.0.2.3"), now)
	tb.spend(key("192.0.2.1"), now.Add(1500*time.Millisecond))
	tb.spend(key("192.0.2.4"), now)
	if tb.len() != 3 {
		t.Fatalf("table holds %d", tb.len())
	}
	if _, held := tb.keys[key("192.0.2.2")]; held {
		t.Error("the least recent key was not the one evicted")
	}
	if _, held := tb.keys[key("192.0.2.1")]; !held {
		t.Error("a recent key was evicted")
	}
}

func TestForwardedForOnlyFromTrustedProxies(t *testing.T) {
	// Untrusted peer: the header is the client's own, and ignored.
	srv, _, _ := tlsEnv(t)
	for i := 0; i < failBurst; i++ {
		tlsGet(t, srv, "", fmt.Sprintf("203.0.113.%d", i+1))
	}
	if s := tlsGet(t, srv, "", "203.0.113.200").StatusCode; s != http.StatusTooManyRequests {
		t.Errorf("a fresh X-Forwarded-For from an untrusted peer escaped its limit: %d, want 429", s)
	}

	// Trusted peer (the test client is on loopback): each forwarded
	// client has its own allowance.
	srv, logBuf, _ := tlsEnv(t, WithTrustedProxies([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}))
	for i := 0; i < failBurst; i++ {
		if s := tlsGet(t, srv, "", "198.51.100.1, 203.0.113.1").StatusCode; s != http.StatusUnauthorized {
			t.Fatalf("forwarded failure %d: %d", i, s)
		}
	}
	if s := tlsGet(t, srv, "", "203.0.113.1").StatusCode; s != http.StatusTooManyRequests {
		t.Errorf("the forwarded client past its burst: %d, want 429", s)
	}
	// A client forging the left of the header stays itself.
	if s := tlsGet(t, srv, "", "192.0.2.99, 203.0.113.1").StatusCode; s != http.StatusTooManyRequests {
		t.Errorf("a forged left-most entry escaped the limit: %d, want 429", s)
	}
	if s := tlsGet(t, srv, "", "203.0.113.2").StatusCode; s != http.StatusUnauthorized {
		t.Errorf("another forwarded client: %d, want 401", s)
	}
	if s := tlsGet(t, srv, testToken, "203.0.113.1").StatusCode; s != http.StatusOK {
		t.Errorf("the right token from the limited forwarded client: %d, want 200", s)
	}
	if !strings.Contains(logBuf.String(), "client=203.0.113.1") {
		t.Errorf("the log does not name the forwarded client:\n%s", logBuf.String())
	}
}

func TestClientAddr(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:f::/48")}
	for _, c := range []struct {
		remote string
		xff    []string
		want   string
	}{
		{"192.0.2.1:5", []string{"203.0.113.9"}, "192.0.2.1"},                         // untrusted peer
		{"10.1.1.1:5", nil, "10.1.1.1"},                                               // trusted, no header
		{"10.1.1.1:5", []string{"203.0.113.9"}, "203.0.113.9"},                        // one proxy
		{"10.1.1.1:5", []string{"1.1.1.1, 203.0.113.9, 10.2.2.2"}, "203.0.113.9"},     // two proxies, forged left
		{"10.1.1.1:5", []string{"1.1.1.1", "203.0.113.9", "10.2.2.2"}, "203.0.113.9"}, // split across header lines
		{"10.1.1.1:5", []string{"10.3.3.3, 10.2.2.2"}, "10.3.3.3"},                    // all trusted: left-most
		{"10.1.1.1:5", []string{"203.0.113.9, garbage"}, "10.1.1.1"},                  // malformed: stop at the last trusted hop
		{"10.1.1.1:5", []string{"203.0.113.9:4444"}, "203.0.113.9"},                   // with a port
		{"[2001:db8:f::1]:5", []string{"[2001:db8:1::7]:80"}, "2001:db8:1::7"},        // IPv6 with brackets
		{"[::ffff:10.1.1.1]:5", []string{"::ffff:203.0.113.9"}, "203.0.113.9"},        // mapped forms
		{"@", []string{"203.0.113.9"}, "invalid IP"},                                  // not an IP peer
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientAddr(r, trusted).String(); got != c.want {
			t.Errorf("%s %q: %s, want %s", c.remote, c.xff, got, c.want)
		}
	}
	// A long header of trusted hops is read only so far.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.1:1"
	long := "203.0.113.9"
	for i := 0; i < 100; i++ {
		long += ", 10.0.0.2"
	}
	r.Header.Set("X-Forwarded-For", long)
	if got := clientAddr(r, trusted).String(); got != "10.0.0.2" {
		t.Errorf("a chain of 100 trusted hops gave %s, want the read to stop at a trusted hop", got)
	}
}
