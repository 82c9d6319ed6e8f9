package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
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

// Failure rate limiting: each client address may fail authentication
// failBurst times at once and then once per failEvery; past that it gets
// 429 without its token being looked at.
const (
	failBurst      = 10
	failEvery      = 6 * time.Second
	maxFailClients = 4096
)

// RequireToken wraps h so that every request must carry
// "Authorization: Bearer TOKEN" with a token of t: a request without one,
// or with a wrong one, is a 401 JSON error. The token is never logged.
func RequireToken(h http.Handler, t *Tokens, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &tokenGate{next: h, tokens: t, log: log, fails: map[string]*rate.Limiter{}}
}

type tokenGate struct {
	next   http.Handler
	tokens *Tokens
	log    *slog.Logger

	mu    sync.Mutex
	fails map[string]*rate.Limiter
}

func (g *tokenGate) limiter(client string) *rate.Limiter {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.fails[client]
	if l == nil {
		if len(g.fails) >= maxFailClients {
			// Forget the clients whose allowance has grown back in full.
			for k, v := range g.fails {
				if v.Tokens() >= failBurst {
					delete(g.fails, k)
				}
			}
			if len(g.fails) >= maxFailClients {
				return nil // too many failing clients: every one is refused
			}
		}
		l = rate.NewLimiter(rate.Every(failEvery), failBurst)
		g.fails[client] = l
	}
	return l
}

func (g *tokenGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	client, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		client = r.RemoteAddr
	}
	l := g.limiter(client)
	if l == nil || l.Tokens() < 1 {
		g.log.Warn("api: refusing a client that failed authentication too often", "client", client)
		w.Header().Set("Retry-After", fmt.Sprint(int(failEvery/time.Second)))
		writeAuthError(w, http.StatusTooManyRequests, CodeRateLimited, "too many failed authentications from this address; retry later")
		return
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !g.tokens.Valid(strings.TrimSpace(token)) {
		l.Allow() // spend one of the client's failures
		g.log.Warn("api: refused a request without a valid bearer token", "client", client, "method", r.Method,
			"path", clipString(r.URL.Path, 128), "had_token", ok)
		w.Header().Set("WWW-Authenticate", `Bearer realm="cellvm"`)
		writeAuthError(w, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required (Authorization: Bearer TOKEN)")
		return
	}
	g.next.ServeHTTP(w, r)
}

func writeAuthError(w http.ResponseWriter, status int, code, msg string) {
	b := fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`+"\n", code, msg)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(status)
	w.Write([]byte(b))
}
