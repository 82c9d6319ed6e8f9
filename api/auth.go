package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellvm/cellvm/sandbox"
)

// MinTokenLen is the shortest bearer token accepted in a token file.
const MinTokenLen = 16

// Tokens is the set of bearer tokens a TCP listener accepts, each with
// its tenant. Only their SHA-256 digests are kept, and every check
// compares all of them in constant time, so neither a token's length nor
// which one matched shows in the time an answer takes.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	tenant string
}

// LoadTokens reads a token file: one token a line, as "TOKEN" or
// "TOKEN TENANT" (a bare token is sandbox.DefaultTenant's); blank lines
// and lines starting with # are skipped. A malformed line is an error
// naming its line, never the token.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	t, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("token file %s%w", path, err)
	}
	return t, nil
}

// ParseTokens parses a token file's contents (see LoadTokens). Its errors
// start with ", line N: " or ": " so LoadTokens can put the path before.
func ParseTokens(b []byte) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		tenant := sandbox.DefaultTenant
		switch len(f) {
		case 1:
		case 2:
			tenant = f[1]
			if !sandbox.ValidTenantName(tenant) {
				return nil, fmt.Errorf(", line %d: the tenant name must be 1 to %d of a-z, 0-9, '-', '_' and '.', starting with a letter or digit", n, sandbox.MaxTenantName)
			}
		default:
			return nil, fmt.Errorf(", line %d: want TOKEN or TOKEN TENANT, found %d fields", n, len(f))
		}
		if len(f[0]) < MinTokenLen {
			return nil, fmt.Errorf(", line %d: a token must be at least %d characters", n, MinTokenLen)
		}
		d := sha256.Sum256([]byte(f[0]))
		if seen[d] {
			return nil, fmt.Errorf(", line %d: the token is on an earlier line too", n)
		}
		seen[d] = true
		t.entries = append(t.entries, tokenEntry{digest: d, tenant: tenant})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf(": %v", err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf(" holds no token")
	}
	return t, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Tenants returns the tenants the tokens name, sorted, each once.
func (t *Tokens) Tenants() []string {
	if t == nil {
		return nil
	}
	set := map[string]bool{}
	for _, e := range t.entries {
		set[e.tenant] = true
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Valid reports whether token is one of the set.
func (t *Tokens) Valid(token string) bool {
	_, _, ok := t.Lookup(token)
	return ok
}

// Lookup returns token's tenant and its id (TokenID), when token is one
// of the set. Every entry is compared, in constant time.
func (t *Tokens) Lookup(token string) (tenant, id string, ok bool) {
	if t == nil || token == "" {
		return "", "", false
	}
	d := sha256.Sum256([]byte(token))
	found := -1
	for i, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", "", false
	}
	return t.entries[found].tenant, TokenID(token), true
}

// TokenID names a token in logs and audit records without giving it away:
// the first 12 hex digits of the SHA-256 of "cellvm token id\x00" and the
// token (a separate digest from the one kept for the check).
func TokenID(token string) string {
	d := sha256.Sum256([]byte("cellvm token id\x00" + token))
	return hex.EncodeToString(d[:6])
}

// RequireToken wraps h so that every request must carry
// "Authorization: Bearer TOKEN" with a token of t: a request without one,
// or with a wrong one, is a 401 JSON error, or 429 once its client has
// failed too often (authlimit.go). The token is always checked first, so
// a valid one is never refused by the failure limiter. The token is never
// logged.
func RequireToken(h http.Handler, t *Tokens, log *slog.Logger, opts ...GateOption) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &tokenGate{next: h, tokens: t, log: log, fails: newFailTable(failBurst, failEvery, maxFailClients),
		logLimit: rate.NewLimiter(rate.Every(time.Second), 20)}
	for _, o := range opts {
		o(g)
	}
	return g
}

// GateOption changes RequireToken's gate.
type GateOption func(*tokenGate)

// WithTrustedProxies names the proxies (cellvm serve --trusted-proxy)
// whose X-Forwarded-For the gate believes: a request whose TCP peer is in
// one of the ranges is counted against the client address the proxies
// recorded (clientAddr). Without it the header is ignored.
func WithTrustedProxies(p []netip.Prefix) GateOption {
	return func(g *tokenGate) { g.trusted = append([]netip.Prefix(nil), p...) }
}

type tokenGate struct {
	next    http.Handler
	tokens  *Tokens
	log     *slog.Logger
	trusted []netip.Prefix
	fails   *failTable

	// logLimit bounds the refusals logged: clients choose how many
	// there are. The ones left out are counted in the next line.
	logLimit   *rate.Limiter
	suppressed atomic.Int64

	// audit: the refusals' records (WithGateAudit), nil for none.
	audit           *auditSink
	auditLimit      *rate.Limiter
	auditSuppressed atomic.Int64
}

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client := clientAddr(r, g.trusted)
	token, hadToken := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tenant, tokenID, valid := g.tokens.Lookup(strings.TrimSpace(token)); hadToken && valid {
		ctx := sandbox.WithCaller(r.Context(), sandbox.Caller{Tenant: tenant, TokenID: tokenID, Peer: client.String()})
		g.next.ServeHTTP(w, r.WithContext(withClientAddr(ctx, client)))
		return
	}
	start := time.Now()
	ok, retry := g.fails.spend(failKey(client), start)
	if !ok {
		g.logRefusal(r, client, hadToken, "api: refused a client that failed authentication too often")
		g.auditRefusal(r, client.String(), http.StatusTooManyRequests, CodeRateLimited, start)
		w.Header().Set("Retry-After", fmt.Sprint(int(retry/time.Second)+1))
		writeAuthError(w, http.StatusTooManyRequests, CodeRateLimited, "too many failed authentications from this address; retry later")
		return
	}
	g.logRefusal(r, client, hadToken, "api: refused a request without a valid bearer token")
	g.auditRefusal(r, client.String(), http.StatusUnauthorized, CodeUnauthorized, start)
	w.Header().Set("WWW-Authenticate", `Bearer realm="cellvm"`)
	writeAuthError(w, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
}

// logRefusal logs a refused request, at most logLimit's rate.
func (g *tokenGate) logRefusal(r *http.Request, client netip.Addr, hadToken bool, msg string) {
	if !g.logLimit.Allow() {
		g.suppressed.Add(1)
		return
	}
	attrs := []any{"client", client.String(), "peer", clipString(r.RemoteAddr, 64), "method", clipString(r.Method, 16),
		"path", clipString(r.URL.Path, 128), "had_token", hadToken}
	if n := g.suppressed.Swap(0); n > 0 {
		attrs = append(attrs, "suppressed", n)
	}
	g.log.Warn(msg, attrs...)
}

func writeAuthError(w http.ResponseWriter, status int, code, msg string) {
	b := fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`+"\n", code, msg)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	w.Write([]byte(b))
}
