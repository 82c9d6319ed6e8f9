package e2b

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/cellvm/cellvm/sandbox"
)

// E2B's getHost(port): any port but envd's and the interpreter's is a TCP
// port in the guest, reached through the agent (Manager.DialPort) — no
// network device, no egress rule, nothing on the host's network. The
// request is passed on as it came (Host included, WebSocket upgrades
// too), less the sandbox's tokens, which the app must never see.

type portProxy struct {
	h  *Handler
	rp *httputil.ReverseProxy
}

// dialKey carries the scope to the transport's dialer.
type dialKey struct{}

func newPortProxy(h *Handler) *portProxy {
	p := &portProxy{h: h}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			s, ok := ctx.Value(dialKey{}).(scope)
			if !ok {
				return nil, errors.New("e2b: a port request without its sandbox")
			}
			return s.m.DialPort(ctx, s.id, s.port)
		},
		// A connection per request: each dial goes through the manager
		// as the request's caller (the tenant check), and nothing of a
		// killed sandbox lingers in a pool.
		DisableKeepAlives:     true,
		ResponseHeaderTimeout: 5 * time.Minute,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			s := pr.In.Context().Value(dialKey{}).(scope)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = strconv.Itoa(s.port) + "-" + s.id + ".sandbox.invalid"
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del(accessTokenHeader)
			pr.Out.Header.Del(trafficTokenHeader)
			pr.SetXForwarded()
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler:  p.fail,
	}
	return p
}

func (p *portProxy) serve(s scope, w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), dialKey{}, s))
	p.rp.ServeHTTP(w, r)
}

// fail answers a request the sandbox's port did not: 502 naming the port
// when nothing listens there, 404 for a sandbox that is gone.
func (p *portProxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	s, _ := r.Context().Value(dialKey{}).(scope)
	switch {
	case errors.Is(err, sandbox.ErrPortClosed):
		writeStatusText(w, http.StatusBadGateway, fmt.Sprintf("nothing listens on port %d in sandbox %s\n", s.port, s.id))
	case errors.Is(err, sandbox.ErrNotFound):
		writeStatusText(w, http.StatusNotFound, fmt.Sprintf("sandbox %s not found\n", s.id))
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads an answer.
	default:
		if p.h.logLimit.Allow() {
			s.log.Warn("e2b: a port request failed", "err", clip(err.Error(), 256))
		}
		msg := err.Error()
		if statusOf(err) == http.StatusInternalServerError {
			msg = "the sandbox's port did not answer"
		}
		writeStatusText(w, http.StatusBadGateway, fmt.Sprintf("port %d in sandbox %s: %s\n", s.port, s.id, strings.TrimSpace(msg)))
	}
}

func writeStatusText(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write([]byte(msg))
}
