package api

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

const testToken = "s3cret-token-0123456789"

func writeTokens(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadTokens(t *testing.T) {
	tok, err := LoadTokens(writeTokens(t, "# operators\n\n"+testToken+"\n  second-token-abcdefgh  \n"))
	if err != nil || tok.Len() != 2 {
		t.Fatalf("%v %v", tok, err)
	}
	for _, c := range []struct {
		token string
		ok    bool
	}{{testToken, true}, {"second-token-abcdefgh", true}, {testToken + "x", false}, {testToken[:10], false}, {"", false}} {
		if tok.Valid(c.token) != c.ok {
			t.Errorf("Valid(%q) = %v", c.token, !c.ok)
		}
	}
	for _, bad := range []string{"", "# only a comment\n", "short\n"} {
		_, err := LoadTokens(writeTokens(t, bad))
		if err == nil || strings.Contains(err.Error(), "short\n") {
			t.Errorf("token file %q: %v", bad, err)
		}
	}
	if _, err := LoadTokens(writeTokens(t, "tooshort\n")); err == nil || strings.Contains(err.Error(), "tooshort") {
		t.Errorf("a short token's error must not show it: %v", err)
	}
}

// TestTokensWithTenants: "TOKEN TENANT" lines, a bare token is the
// default tenant's, and each malformed line is an error naming its line
// and never the token.
func TestTokensWithTenants(t *testing.T) {
	tok, err := ParseTokens([]byte("# tenants\n" + testToken + "\nalpha-token-0123456789 alpha\n  beta-token-0123456789\tbeta.team_1  \n"))
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{testToken: "default", "alpha-token-0123456789": "alpha", "beta-token-0123456789": "beta.team_1"} {
		tenant, id, ok := tok.Lookup(token)
		if !ok || tenant != want || len(id) != 12 || strings.Contains(token, id) {
			t.Errorf("Lookup(%q) = %q %q %v; want tenant %s and a 12-digit id", token, tenant, id, ok, want)
		}
	}
	if _, _, ok := tok.Lookup("alpha-token-012345678"); ok {
		t.Error("a prefix of a token passed")
	}
	if got := fmt.Sprint(tok.Tenants()); got != "[alpha beta.team_1 default]" {
		t.Errorf("Tenants() = %s", got)
	}
	const secret = "secret-token-0123456789"
	for _, c := range []struct{ file, line string }{
		{"# x\n" + secret + " Alpha\n", "line 2"},
		{secret + " alpha extra\n", "line 1"},
		{secret + " -alpha\n", "line 1"},
		{secret + " " + strings.Repeat("a", 65) + "\n", "line 1"},
		{"short alpha\n", "line 1"},
		{secret + " alpha\n" + secret + " beta\n", "line 2"},
	} {
		_, err := ParseTokens([]byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.line) || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "short") {
			t.Errorf("token file %q: %v; want an error naming %s and not the token", c.file, err, c.line)
		}
	}
}

// tlsEnv is the API over TLS with tokens, on a loopback port.
func tlsEnv(t *testing.T, opts ...GateOption) (*httptest.Server, *syncBuffer, *x509.CertPool) {
	t.Helper()
	tok, err := LoadTokens(writeTokens(t, testToken+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	logBuf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logBuf, nil))
	srv := httptest.NewTLSServer(RequireToken(NewServer(sandboxtest.New(), log), tok, log, opts...))
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, logBuf, pool
}

func TestTokenRequiredOverTLS(t *testing.T) {
	srv, logBuf, pool := tlsEnv(t)
	ctx := context.Background()
	tlsCfg := srv.Client().Transport.(*http.Transport).TLSClientConfig

	// No token, a wrong one: 401, as an *Error that says so.
	for _, token := range []string{"", "wrong-token-0123456789"} {
		c, err := Dial(srv.URL, WithToken(token), WithTLSConfig(tlsCfg))
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.List(ctx)
		wantClientError(t, "list with token "+token, err, http.StatusUnauthorized, CodeUnauthorized)
		if !errors.Is(err, ErrUnauthorized) {
			t.Errorf("401 is not ErrUnauthorized: %v", err)
		}
	}
	// The right token: the whole API, streams and metrics included.
	c, err := Dial(srv.URL, WithToken(testToken), WithTLSConfig(tlsCfg))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Create(ctx, sandboxConfigForTest())
	if err != nil {
		t.Fatalf("create with the token: %v", err)
	}
	if _, err := c.RunCell(ctx, info.ID, sandbox.Cell{Code: "x", Timeout: 0}, func(cell.Event) {}); err != nil {
		t.Errorf("streamed cell with the token: %v", err)
	}
	if _, err := c.Metrics(ctx); err != nil {
		t.Errorf("metrics with the token: %v", err)
	}
	if strings.Contains(logBuf.String(), testToken) || strings.Contains(logBuf.String(), "wrong-token-0123456789") {
		t.Errorf("a token reached the log:\n%s", logBuf.String())
	}
	if !strings.Contains(logBuf.String(), "without a valid bearer token") {
		t.Errorf("refusals are not logged:\n%s", logBuf.String())
	}
	// Dial refuses plain http: the token would travel in clear.
	if _, err := Dial("http://127.0.0.1:1", WithToken(testToken)); err == nil {
		t.Error("Dial accepted http://")
	}
	// The CA file option trusts the daemon's certificate.
	ca := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(ca, pemOf(srv.Certificate().Raw), 0o644)
	c2, err := Dial(srv.URL, WithToken(testToken), WithCAFile(ca))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.List(ctx); err != nil {
		t.Errorf("with the CA file: %v", err)
	}
	_ = pool
}

func TestSocketGroup(t *testing.T) {
	gid := os.Getgid()
	sock := filepath.Join(shortTempDir(t), "g.sock")
	ln, err := ListenUnix(sock, AllowGroup(gid))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
		t.Errorf("socket mode %v gid %d, want 0660 and %d", fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Gid, gid)
	}
	self := syscall.Ucred{Pid: int32(os.Getpid()), Uid: 4242, Gid: 4242}
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if g != 4242 && !inGroup(self, g) {
			t.Errorf("a supplementary group %d of the peer is not accepted", g)
		}
	}
	if !inGroup(syscall.Ucred{Pid: self.Pid, Gid: 777}, 777) {
		t.Error("the peer's primary group is not accepted")
	}
	if inGroup(self, 987654) || inGroup(self, -1) {
		t.Error("a group the peer is not in is accepted")
	}
}

func pemOf(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
