package e2b

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

// sdkDir is the SDK harness (package.json pinning e2b and
// @e2b/code-interpreter; `make e2b-sdk` runs npm ci there).
const sdkDir = "../../test/e2b"

// sdkSkipFake is what the fake manager cannot do for the SDK: the
// interpreter, envd's files and commands, the ports (which need a server
// process in the sandbox). E2B_TEST_SKIP in the environment replaces it.
const sdkSkipFake = "runCode,files,commands,pty,ports"

// TestSDK runs E2B's own JS SDK (test/e2b/sdk.test.mjs), unchanged,
// against the front end over TLS with the fake manager behind the tenant
// layer: a certificate for *.e2b.test from a test CA (NODE_EXTRA_CA_CERTS),
// the wildcard name from test/e2b/dns-hook.mjs, and only E2B_DOMAIN and
// E2B_API_KEY set for the SDK.
func TestSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the E2B SDK test needs node 20.18 or later")
	}
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("test/e2b/node_modules is missing: run `make e2b-sdk` (npm ci in test/e2b)")
	}
	toks, err := api.ParseTokens([]byte(keyAlpha + " alpha\n" + keyBeta + " beta\n"))
	if err != nil {
		t.Fatal(err)
	}
	fake := newFakeManager()
	h, err := NewHandler(tenant.New(fake, tenant.Options{}), Options{Domain: testDomain, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	certPEM, cert := wildcardCert(t, testDomain)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	skip := sdkSkipFake
	if _, err := fake.Contexts(t.Context(), "sb-probe"); errors.Is(err, sandbox.ErrNotSupported) {
		// A double without named sessions (before issue 27's) cannot
		// show contexts.
		t.Log("the fake manager has no contexts: skipping them")
		skip += ",contexts"
	}
	if s, ok := os.LookupEnv("E2B_TEST_SKIP"); ok {
		skip = s
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--import", "./dns-hook.mjs", "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = sdkDir
	cmd.Env = append(cleanEnv(),
		"E2B_DOMAIN="+testDomain+":"+port,
		"E2B_API_KEY="+keyAlpha,
		"NODE_EXTRA_CA_CERTS="+caFile,
		"E2B_TEST_RESOLVE="+testDomain+"=127.0.0.1",
		"E2B_TEST_OTHER_KEY="+keyBeta,
		"E2B_TEST_SKIP="+skip,
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("node sdk.test.mjs (skipping %q):\n%s", skip, out.String())
	if err != nil {
		t.Fatalf("the E2B SDK's tests failed: %v", err)
	}
	if n := fake.Live(); n != 0 {
		t.Fatalf("%d sandboxes left after the SDK's tests", n)
	}
}

// cleanEnv is the test's environment without E2B's and node's own
// variables, so that nothing but what TestSDK sets reaches the SDK.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := bytes.Cut([]byte(kv), []byte("=")); bytes.HasPrefix(k, []byte("E2B_")) || bytes.HasPrefix(k, []byte("NODE_")) {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// wildcardCert makes a self-signed certificate (its own CA) for domain
// and *.domain.
func wildcardCert(t *testing.T, domain string) ([]byte, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "cellvm e2b test CA"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        true, BasicConstraintsValid: true,
		DNSNames: []string{domain, "*." + domain},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, cert
}
