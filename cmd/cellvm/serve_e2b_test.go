package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeE2BDomain: --e2b-domain answers E2B's API on the TLS listener
// by Host, under the self-signed certificate (which covers DOMAIN and
// *.DOMAIN), and leaves cellvm's own API where it was.
func TestServeE2BDomain(t *testing.T) {
	d := startRemoteDaemon(t, "--e2b-domain", "e2b.test")
	addr := strings.TrimPrefix(d.url, "https://")
	pem, err := os.ReadFile(d.cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	// Every name dials the listener, as wildcard DNS would; the
	// certificate must match the name asked for.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}}}
	get := func(url string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get("https://api.e2b.test/v2/sandboxes", map[string]string{"X-API-KEY": remoteToken}); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("E2B list: %d %s", code, body)
	}
	if code, body := get("https://api.e2b.test/v2/sandboxes", nil); code != 401 || !strings.Contains(body, `"code":401`) {
		t.Fatalf("E2B list without a key: %d %s", code, body)
	}
	// The wildcard is in the certificate: a sandbox host's handshake
	// succeeds (and, without its token, is refused).
	if code, _ := get("https://49983-sb-0123456789ab.e2b.test/health", nil); code != 401 {
		t.Fatalf("a sandbox host without a token: %d", code)
	}
	// cellvm's own API on the listener's address, as before.
	if code, body := get("https://"+addr+"/v1/sandboxes", map[string]string{"Authorization": "Bearer " + remoteToken}); code != 200 {
		t.Fatalf("cellvm's API beside E2B's: %d %s", code, body)
	}
}

func TestServeE2BDomainUsage(t *testing.T) {
	for _, bad := range [][]string{
		{"--e2b-domain", "e2b.test"}, // without --listen
		{"--e2b-domain", "https://e2b.test", "--listen", "tcp://127.0.0.1:0", "--token-file", "/dev/null"},
		{"--e2b-domain", "*.e2b.test", "--listen", "tcp://127.0.0.1:0", "--token-file", "/dev/null"},
		{"--e2b-domain", "localhost", "--listen", "tcp://127.0.0.1:0", "--token-file", "/dev/null"},
	} {
		if r := cellvmEnv(t, nil, "", append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "s.sock")}, bad...)...); r.code != exitUsage {
			t.Errorf("serve %v: exit %d, want %d (%s)", bad, r.code, exitUsage, r.stderr)
		}
	}
}
