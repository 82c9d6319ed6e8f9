package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// MinTokenLen is the shortest bearer token accepted in a token file.
const MinTokenLen = 16

// Tokens is the set of bearer tokens a TCP listener accepts. Only their
// SHA-256 digests are kept, and every check compares all of them in
// constant time, so neither a token's length nor which one matched shows
// in the time an answer takes.
type Tokens struct {
	digests [][sha256.Size]byte
}

// LoadTokens reads a token file: one token a line; blank lines and lines
// starting with # are skipped. The tokens themselves never appear in an
// error.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	t := &Tokens{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(line) < MinTokenLen {
			return nil, fmt.Errorf("token file %s, line %d: a token must be at least %d characters", path, n, MinTokenLen)
		}
		t.digests = append(t.digests, sha256.Sum256([]byte(line)))
	}
	if len(t.digests) == 0 {
		return nil, fmt.Errorf("token file %s holds no token", path)
	}
	return t, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.digests)
}

// Valid reports whether token is one of the set.
func (t *Tokens) Valid(token string) bool {
	if t == nil || token == "" {
		return false
	}
	d := sha256.Sum256([]byte(token))
	ok := 0
	for _, want := range t.digests {
		ok |= subtle.ConstantTimeCompare(d[:], want[:])
	}
	return ok == 1
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
	if hadToken && g.tokens.Valid(strings.TrimSpace(token)) {
		g.next.ServeHTTP(w, r.WithContext(withClientAddr(r.Context(), client)))
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
