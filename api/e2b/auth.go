package e2b

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/cellvm/cellvm/sandbox"
)

// Who may do what. E2B_API_KEY is a cellvm token (the --token-file of
// cellvm serve): the SDK sends it as X-API-KEY to api.DOMAIN, and its
// tenant is the caller of every control-plane call, so the tenant layer
// below shows each tenant its own sandboxes only.
//
// The sandbox hosts (PORT-ID.DOMAIN) never see the API key: the SDK
// sends the envdAccessToken that create or connect returned, as
// X-Access-Token, to envd (49983) and to the code interpreter (49999),
// and the trafficAccessToken, as E2B-Traffic-Access-Token, to the code
// interpreter's /contexts and (when the user adds it) to getHost(port).
// cellvm always hands out both, whatever `secure` said, so no sandbox host
// is ever served without a credential.
//
// Both are capabilities for one sandbox of one tenant: an HMAC, under the
// daemon's key, of their kind, the tenant and the sandbox id, with the
// tenant in clear before it. Checking one needs no lookup and no state,
// a token of sandbox A is worthless on sandbox B's host, and the manager
// is called as that tenant, so a token outliving its sandbox reaches
// nothing (404). The envd token opens every port; the traffic token opens
// every port but envd's, so a web app's link can be shared without giving
// away the sandbox's shell. A wrong token is 401 whether the sandbox
// exists or not.

// Headers the SDK sends.
const (
	apiKeyHeader       = "X-API-KEY"
	accessTokenHeader  = "X-Access-Token"
	trafficTokenHeader = "E2B-Traffic-Access-Token"
)

// Token kinds, the prefix of each token.
const (
	envdKind    = "cve_"
	trafficKind = "cvt_"
)

// tokenMACLen is how much of the HMAC a token carries (160 bits).
const tokenMACLen = 20

// keyLen is the length of the daemon's token key.
const keyLen = 32

// minter makes and checks the sandbox tokens.
type minter struct{ key []byte }

func (k minter) mac(kind, tenant, id string) []byte {
	h := hmac.New(sha256.New, k.key)
	h.Write([]byte(kind + "\x00" + tenant + "\x00" + id))
	return h.Sum(nil)[:tokenMACLen]
}

// token is kind's token for the sandbox id of tenant.
func (k minter) token(kind, tenant, id string) string {
	return kind + base64.RawURLEncoding.EncodeToString([]byte(sandbox.Owner(tenant))) + "." +
		hex.EncodeToString(k.mac(kind, sandbox.Owner(tenant), id))
}

// check returns the tenant a token of one of kinds grants for sandbox id.
func (k minter) check(tok, id string, kinds ...string) (tenant string, ok bool) {
	if len(tok) > 256 {
		return "", false
	}
	for _, kind := range kinds {
		rest, found := strings.CutPrefix(tok, kind)
		if !found {
			continue
		}
		t64, macHex, found := strings.Cut(rest, ".")
		if !found {
			return "", false
		}
		t, err := base64.RawURLEncoding.DecodeString(t64)
		if err != nil || !sandbox.ValidTenantName(string(t)) {
			return "", false
		}
		got, err := hex.DecodeString(macHex)
		if err != nil {
			return "", false
		}
		if hmac.Equal(got, k.mac(kind, string(t), id)) {
			return string(t), true
		}
		return "", false
	}
	return "", false
}

// apiCaller returns the caller an X-API-KEY stands for.
func (h *Handler) apiCaller(r *http.Request) (sandbox.Caller, bool) {
	key := strings.TrimSpace(r.Header.Get(apiKeyHeader))
	if key == "" {
		// E2B's access tokens (the CLI's) come as a bearer token.
		key, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		key = strings.TrimSpace(key)
	}
	tenant, id, ok := h.tokens.Lookup(key)
	if !ok {
		return sandbox.Caller{}, false
	}
	return sandbox.Caller{Tenant: tenant, TokenID: id, Peer: peerOf(r)}, true
}

// sandboxCaller returns the caller a sandbox host's token stands for: the
// envd token opens every port, the traffic token every port but envd's.
func (h *Handler) sandboxCaller(r *http.Request, id string, port int) (sandbox.Caller, bool) {
	kinds := []string{envdKind, trafficKind}
	if port == EnvdPort {
		kinds = kinds[:1]
	}
	for _, hdr := range []string{accessTokenHeader, trafficTokenHeader} {
		if tok := strings.TrimSpace(r.Header.Get(hdr)); tok != "" {
			if tenant, ok := h.minter.check(tok, id, kinds...); ok {
				return sandbox.Caller{Tenant: tenant, TokenID: "sandbox:" + id, Peer: peerOf(r)}, true
			}
		}
	}
	return sandbox.Caller{}, false
}

func peerOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return clip(r.RemoteAddr, 64)
	}
	return host
}

// failures bounds how often one client address may fail to authenticate:
// a burst, then one a second. Past it the answer is 429 (the SDK's
// RateLimitError), which a valid credential never gets. The table is
// bounded; when full it starts over, which only forgives.
type failures struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

const (
	failBurst   = 20
	failEvery   = time.Second
	maxFailKeys = 4096
)

func (f *failures) allow(client string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= maxFailKeys {
		f.m = map[string]*rate.Limiter{}
	}
	l := f.m[client]
	if l == nil {
		l = rate.NewLimiter(rate.Every(failEvery), failBurst)
		f.m[client] = l
	}
	return l.Allow()
}

// refuse answers a request without a valid credential: 401, or 429 once
// its client has failed too often. Refusals are logged at a bounded rate.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, what string) {
	client := peerOf(r)
	if h.logLimit.Allow() {
		h.log.Warn("e2b: refused a request without a valid "+what, "client", client,
			"host", clip(r.Host, 128), "method", clip(r.Method, 16), "path", clip(r.URL.Path, 128))
	}
	if !h.fails.allow(client) {
		w.Header().Set("Retry-After", "1")
		writeStatus(w, http.StatusTooManyRequests, "too many failed authentications from this address; retry later")
		return
	}
	writeStatus(w, http.StatusUnauthorized, "a valid "+what+" is required")
}
