package api

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
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The TCP listener's certificate: the operator's own (LoadServerTLS), or
// one the daemon makes for itself at start (SelfSignedServerTLS) and
// writes where clients can fetch it to trust (their --tls-ca). Both give
// a tls.Config for the listener; the listener and RequireToken are in
// listen.go and auth.go.

// SelfSignedCertFile is the name of the self-signed certificate in the
// directory SelfSignedServerTLS writes it to.
const SelfSignedCertFile = "cert.pem"

// LoadServerTLS is the listener's configuration with the certificate and
// key in the PEM files certFile and keyFile.
func LoadServerTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil
}

// SelfSignedServerTLS makes a self-signed certificate for host (an address
// or a name the listener is reached at; "" or an unspecified address: this
// machine's name) and localhost, writes it to dir/SelfSignedCertFile (dir
// made 0700, the certificate 0644; the key is never written), and returns
// the listener's configuration, the certificate's path and its SHA-256
// fingerprint (hex, of the DER) for the log. names are more DNS names it
// covers ("*.e2b.example.com" for the E2B front end's sandbox hosts).
func SelfSignedServerTLS(dir, host string, names ...string) (cfg *tls.Config, certPath, sha256Hex string, err error) {
	certPEM, keyPEM, err := selfSigned(host, names...)
	if err != nil {
		return nil, "", "", fmt.Errorf("make a self-signed certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", "", err
	}
	certPath = filepath.Join(dir, SelfSignedCertFile)
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, "", "", err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, "", "", err
	}
	sum := sha256.Sum256(cert.Certificate[0])
	cfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	return cfg, certPath, hex.EncodeToString(sum[:]), nil
}

// selfSigned makes an ECDSA P-256 certificate valid for a year for host
// (an address or a name; this machine's name when empty or unspecified)
// and localhost.
func selfSigned(host string, names ...string) (certPEM, keyPEM []byte, err error) {
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
		DNSNames:    append([]string{"localhost"}, names...),
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
