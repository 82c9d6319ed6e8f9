package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent/mcpserver"
	"github.com/cellvm/cellvm/sandbox"
)

// lookupGroup resolves --socket-group (a name or a gid).
func lookupGroup(g string) (int, error) {
	if gid, err := strconv.Atoi(g); err == nil && gid >= 0 {
		return gid, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("--socket-group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}

// serverTLS is the TCP listener's TLS configuration: --tls-cert and
// --tls-key, or a self-signed certificate made now for the listen address
// (and localhost), written to STATE_DIR/tls/cert.pem for clients to trust.
// It returns the certificate's path for the log.
func serverTLS(o *serveOptions, log *slog.Logger) (*tls.Config, string, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, "", usageError{fmt.Errorf("--tls-cert/--tls-key: %w", err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, o.tlsCert, nil
	}
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(o.listen, "tcp://"))
	certPEM, keyPEM, err := selfSigned(host)
	if err != nil {
		return nil, "", fmt.Errorf("make a self-signed certificate: %w", err)
	}
	dir := filepath.Join(o.stateDir, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	path := filepath.Join(dir, "cert.pem")
	if err := os.WriteFile(path, certPEM, 0o644); err != nil {
		return nil, "", err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(cert.Certificate[0])
	log.Warn("serving TLS with a self-signed certificate made at start; clients must trust it (--tls-ca)",
		"cert", path, "sha256", hex.EncodeToString(sum[:]))
	cfg.Certificates = []tls.Certificate{cert}
	return cfg, path, nil
}

// selfSigned makes an ECDSA P-256 certificate valid for a year for host
// (an address or a name; all addresses when empty) and localhost.
func selfSigned(host string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "cellvm daemon"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else if host != "" && ip == nil {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	} else if name, err := os.Hostname(); err == nil {
		tmpl.DNSNames = append(tmpl.DNSNames, name)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

// mcpPath is where serve --mcp answers MCP's Streamable HTTP.
const mcpPath = "/mcp"

// newMCPHandler serves the sandbox tools over Streamable HTTP: a sandbox
// per MCP session, deleted when the session ends (the client's DELETE) or
// idles out (--mcp-idle-timeout). The returned function ends the sessions.
func newMCPHandler(m sandbox.Manager, o *serveOptions, log *slog.Logger) (http.Handler, func()) {
	cfg := sandbox.Config{IdleTimeout: o.mcpSession + time.Minute}
	srv := mcpserver.New(m, mcpserver.Options{Config: cfg, Toolbox: o.mcpFlags.toolbox(), Log: log, Version: moduleVersion()})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv.MCP() }, &mcp.StreamableHTTPOptions{
		SessionTimeout: o.mcpSession,
		Logger:         log,
		// The daemon's own auth guards the listener; a remote client
		// reaches it under its own host name.
		DisableLocalhostProtection: true,
	})
	return h, srv.Close
}

// withMCP routes mcpPath to the MCP handler and everything else to the API.
func withMCP(apiHandler, mcpHandler http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == mcpPath {
			mcpHandler.ServeHTTP(w, r)
			return
		}
		apiHandler.ServeHTTP(w, r)
	})
}
