package api

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DialOption configures Dial.
type DialOption func(*dialConfig)

type dialConfig struct {
	token  string
	caFile string
	tls    *tls.Config
}

// WithToken sends token as a bearer token with every request.
func WithToken(token string) DialOption { return func(c *dialConfig) { c.token = token } }

// WithCAFile trusts the PEM certificates in path (for a daemon's
// self-signed certificate) instead of the system's roots; "" keeps the
// system's.
func WithCAFile(path string) DialOption { return func(c *dialConfig) { c.caFile = path } }

// WithTLSConfig sets the TLS configuration outright (it wins over
// WithCAFile).
func WithTLSConfig(cfg *tls.Config) DialOption { return func(c *dialConfig) { c.tls = cfg } }

// Dial returns a client for target: a Unix socket ("/run/cellvm/cellvm.sock"
// or "unix:///run/...") or a daemon's TLS listener ("https://host:port").
// Plain http:// is refused: the token would cross the network in clear.
func Dial(target string, opts ...DialOption) (*Client, error) {
	var cfg dialConfig
	for _, o := range opts {
		o(&cfg)
	}
	if p, ok := strings.CutPrefix(target, "unix://"); ok {
		target = p
	}
	if strings.HasPrefix(target, "/") {
		c := NewClient(target)
		c.token = cfg.token
		return c, nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("daemon URL %q: %w", target, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("daemon URL %q: want https://HOST:PORT or a socket path (plain http would send the token in clear)", target)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("daemon URL %q: want https://HOST:PORT, with no path, query or user", target)
	}
	tc := cfg.tls
	if tc == nil {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.caFile != "" {
			pem, err := os.ReadFile(cfg.caFile)
			if err != nil {
				return nil, fmt.Errorf("read the CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("CA file %s holds no PEM certificate", cfg.caFile)
			}
			tc.RootCAs = pool
		}
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	return newClient("https://"+u.Host, cfg.token, &http.Transport{DialContext: d.DialContext, TLSClientConfig: tc}), nil
}
