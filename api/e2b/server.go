package e2b

import (
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// The ports of E2B's in-sandbox services, which cellvm answers itself
// (the guest runs neither envd nor Jupyter).
const (
	EnvdPort   = 49983
	InterpPort = 49999
)

// Options configure the E2B front end.
type Options struct {
	// Domain is E2B_DOMAIN as the SDK is given it ("e2b.example.com"; a
	// ":PORT" after it is ignored here: the Host header is matched by
	// name).
	Domain string
	// Tokens are the API keys: cellvm's own tokens, with their tenants.
	Tokens *api.Tokens
	// Key signs the sandboxes' access tokens (32 bytes or more; see
	// auth.go). Keep it across restarts so the SDK's tokens stay good;
	// nil makes a random one, good until the process ends.
	Key []byte
	// Next answers the requests whose Host is not under Domain (cellvm's
	// own API behind its token gate); nil answers them 404.
	Next http.Handler
	// Log receives refusals (rate-limited) and internal errors; nil
	// discards them.
	Log *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Handler is the E2B front end: an http.Handler routing by Host.
type Handler struct {
	m        sandbox.Manager
	domain   string
	tokens   *api.Tokens
	minter   minter
	next     http.Handler
	log      *slog.Logger
	now      func() time.Time
	fails    failures
	logLimit *rate.Limiter
	proxy    *portProxy
}

// NewHandler returns the E2B front end over m, which must be the tenant
// layer (it is called as the authenticated caller and must show each
// tenant its own sandboxes only).
func NewHandler(m sandbox.Manager, o Options) (*Handler, error) {
	d := strings.ToLower(strings.TrimSuffix(hostOnly(o.Domain), "."))
	if d == "" || strings.ContainsAny(d, "/ *") {
		return nil, errors.New("e2b: a domain (E2B_DOMAIN) is required: a DNS name whose subdomains reach this listener")
	}
	if o.Tokens.Len() == 0 {
		return nil, errors.New("e2b: the E2B front end needs API keys (cellvm tokens)")
	}
	key := o.Key
	if key == nil {
		key = make([]byte, keyLen)
		rand.Read(key)
	}
	if len(key) < keyLen {
		return nil, errors.New("e2b: the access-token key must be at least 32 bytes")
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	h := &Handler{m: m, domain: d, tokens: o.Tokens, minter: minter{key: key}, next: o.Next, log: log, now: now,
		logLimit: rate.NewLimiter(rate.Every(time.Second), 10)}
	h.proxy = newPortProxy(h)
	return h, nil
}

// ServeHTTP routes by the Host header: api.DOMAIN to the control plane,
// PORT-ID.DOMAIN to a sandbox's port, any other name under DOMAIN is 404,
// and a name outside it goes to Next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host := strings.ToLower(strings.TrimSuffix(hostOnly(r.Host), "."))
	sub, under := strings.CutSuffix(host, "."+h.domain)
	if !under && host != h.domain {
		if h.next != nil {
			h.next.ServeHTTP(w, r)
			return
		}
		writeErrorf(w, http.StatusNotFound, "no such host: this listener answers E2B's API at api.%s", h.domain)
		return
	}
	if sub == "api" {
		c, ok := h.apiCaller(r)
		if !ok {
			h.refuse(w, r, "API key (X-API-KEY: a cellvm token)")
			return
		}
		h.control(w, r.WithContext(sandbox.WithCaller(r.Context(), c)))
		return
	}
	port, id, ok := parseSandboxHost(sub)
	if !ok {
		writeErrorf(w, http.StatusNotFound, "no such host under %s: want api.%s or PORT-SANDBOXID.%s", h.domain, h.domain, h.domain)
		return
	}
	c, ok := h.sandboxCaller(r, id, port)
	if !ok {
		h.refuse(w, r, "sandbox access token (X-Access-Token or E2B-Traffic-Access-Token, as create or connect returned)")
		return
	}
	r = r.WithContext(sandbox.WithCaller(r.Context(), c))
	s := scope{m: h.m, id: id, port: port, log: h.log.With("sandbox", id, "port", port)}
	switch port {
	case EnvdPort:
		serveEnvd(s, w, r)
	case InterpPort:
		serveInterp(s, w, r)
	default:
		h.proxy.serve(s, w, r)
	}
}

// parseSandboxHost splits "PORT-ID" (the first label of a sandbox host).
func parseSandboxHost(sub string) (port int, id string, ok bool) {
	p, id, found := strings.Cut(sub, "-")
	if !found || len(p) == 0 || len(p) > 5 || !validID(id) {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < sandbox.MinPort || port > sandbox.MaxPort || p[0] == '0' {
		return 0, "", false
	}
	return port, id, true
}

// validID keeps a sandbox id to what cellvm makes ("sb-" and lowercase
// hex, with a node name between): one DNS label's alphabet and length.
func validID(id string) bool {
	if len(id) < 4 || len(id) > 63 || !strings.HasPrefix(id, "sb-") || strings.HasSuffix(id, "-") {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// hostOnly is host without a ":PORT".
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
