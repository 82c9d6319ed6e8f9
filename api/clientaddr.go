package api

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// maxForwardedHops bounds how many X-Forwarded-For entries the gate reads,
// from the right: a chain of trusted proxies longer than this is not a
// deployment anyone runs, and a client can make the header long.
const maxForwardedHops = 16

// clientAddr is the address a request comes from: its TCP peer, or, when
// the peer is one of the trusted proxies, the right-most address in
// X-Forwarded-For that is not a trusted proxy. Each trusted proxy appends
// the address it was connected from, so entries to the right of the first
// untrusted one were written by proxies the operator vouched for; that
// entry is the client, and everything to its left is the client's to
// forge. A malformed entry stops the walk at the last trusted hop, and a
// chain of trusted hops only gives the left-most of them.
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer := parseHostAddr(r.RemoteAddr)
	if !peer.IsValid() || !inPrefixes(peer, trusted) {
		return peer
	}
	hops := r.Header.Values("X-Forwarded-For")
	client := peer
	seen := 0
	for i := len(hops) - 1; i >= 0; i-- {
		parts := strings.Split(hops[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			if seen++; seen > maxForwardedHops {
				return client
			}
			a := parseHostAddr(strings.TrimSpace(parts[j]))
			if !a.IsValid() {
				return client
			}
			client = a
			if !inPrefixes(a, trusted) {
				return a
			}
		}
	}
	return client
}

// parseHostAddr parses "IP", "IP:PORT" or "[IP]:PORT" to an address
// without a zone, IPv4-mapped addresses unmapped; anything else is the
// zero Addr.
func parseHostAddr(s string) netip.Addr {
	if len(s) > 64 {
		return netip.Addr{}
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		host, _, err2 := net.SplitHostPort(s)
		if err2 != nil {
			return netip.Addr{}
		}
		if a, err = netip.ParseAddr(host); err != nil {
			return netip.Addr{}
		}
	}
	return a.WithZone("").Unmap()
}

func inPrefixes(a netip.Addr, ps []netip.Prefix) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

type clientAddrKey struct{}

// ClientAddr returns the client address RequireToken found for the
// request with ctx (after --trusted-proxy's X-Forwarded-For), if the
// request came through it.
func ClientAddr(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(clientAddrKey{}).(netip.Addr)
	return a, ok
}

func withClientAddr(ctx context.Context, a netip.Addr) context.Context {
	return context.WithValue(ctx, clientAddrKey{}, a)
}
