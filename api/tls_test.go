package api

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSelfSignedServerTLS: the certificate written for clients verifies
// for the listen address and localhost (and not for another name), the
// directory is private, the key is not written, and the fingerprint is
// the served certificate's.
func TestSelfSignedServerTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	cfg, path, fp, err := SelfSignedServerTLS(dir, "192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dir, SelfSignedCertFile) {
		t.Errorf("certificate at %s", path)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("the directory: %v %v, want mode 0700", st.Mode(), err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in %s, want the certificate alone", len(entries), dir)
	}
	if cfg.MinVersion != tls.VersionTLS12 || len(cfg.Certificates) != 1 {
		t.Fatalf("config %+v", cfg)
	}
	sum := sha256.Sum256(cfg.Certificates[0].Certificate[0])
	if fp != hex.EncodeToString(sum[:]) {
		t.Errorf("fingerprint %s is not the served certificate's", fp)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no PEM certificate", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	for _, name := range []string{"192.0.2.7", "localhost", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: name}); err != nil {
			t.Errorf("does not verify for %s: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "other.example"}); err == nil {
		t.Error("verifies for a name it was not made for")
	}
	// A name, not an address: the name is in the certificate.
	_, path, _, err = SelfSignedServerTLS(t.TempDir(), "cellvm.example")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	block, _ = pem.Decode(b)
	if cert, err := x509.ParseCertificate(block.Bytes); err != nil || cert.VerifyHostname("cellvm.example") != nil {
		t.Errorf("a certificate for a name: %v", err)
	}
}

// TestSelfSignedServesTLS: a client trusting the written certificate
// completes a handshake with a listener using the configuration.
func TestSelfSignedServesTLS(t *testing.T) {
	cfg, path, _, err := SelfSignedServerTLS(t.TempDir(), "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	b, _ := os.ReadFile(path)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(b)
	dialer := &net.Dialer{Timeout: 10 * time.Second, Deadline: time.Now().Add(time.Minute)}
	c, err := tls.DialWithDialer(dialer, "tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("handshake trusting %s: %v", path, err)
	}
	c.Close()
	if _, err := tls.DialWithDialer(dialer, "tcp", ln.Addr().String(), &tls.Config{}); err == nil {
		t.Error("a client trusting only the system's roots completed the handshake")
	}
}

// TestLoadServerTLS: the operator's certificate and key are loaded; a
// missing or mismatched file is an error.
func TestLoadServerTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := selfSigned("")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	os.WriteFile(certFile, certPEM, 0o644)
	os.WriteFile(keyFile, keyPEM, 0o600)
	cfg, err := LoadServerTLS(certFile, keyFile)
	if err != nil || len(cfg.Certificates) != 1 || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("LoadServerTLS: %+v %v", cfg, err)
	}
	if _, err := LoadServerTLS(certFile, filepath.Join(dir, "none.pem")); err == nil {
		t.Error("a missing key loaded")
	}
	_, otherKey, _ := selfSigned("")
	os.WriteFile(keyFile, otherKey, 0o600)
	if _, err := LoadServerTLS(certFile, keyFile); err == nil {
		t.Error("a key of another certificate loaded")
	}
}

// TestSelfSignedForAllAddresses: a listener on every address (0.0.0.0)
// gets a certificate for this machine's name, besides localhost.
func TestSelfSignedForAllAddresses(t *testing.T) {
	name, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name: %v", err)
	}
	certPEM, _, err := selfSigned("0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if cert.VerifyHostname(name) != nil || cert.VerifyHostname("localhost") != nil {
		t.Errorf("names %v, addresses %v: want %s and localhost", cert.DNSNames, cert.IPAddresses, name)
	}
	if slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.IsUnspecified() }) {
		t.Errorf("the unspecified address is in the certificate: %v", cert.IPAddresses)
	}
}

// TestSelfSignedNames: the extra names (the E2B front end's DOMAIN and
// *.DOMAIN) are in the certificate beside localhost.
func TestSelfSignedNames(t *testing.T) {
	cfg, _, _, err := SelfSignedServerTLS(t.TempDir(), "127.0.0.1", "e2b.test", "*.e2b.test")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"localhost", "e2b.test", "api.e2b.test", "49983-sb-1.e2b.test"} {
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := leaf.VerifyHostname("a.b.e2b.test"); err == nil {
		t.Error("the wildcard covers two labels")
	}
}
