package main

import (
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/api/e2b"
	"github.com/cellvm/cellvm/sandbox"
)

// e2bFlags are serve's E2B front end: --e2b-domain DOMAIN answers E2B's
// addressing (api.DOMAIN, PORT-SANDBOXID.DOMAIN) on the --listen TLS
// listener, so E2B's own SDKs drive this daemon with E2B_DOMAIN=DOMAIN
// and E2B_API_KEY set to one of the --token-file's tokens.
type e2bFlags struct {
	domain string
}

func addE2BFlags(fs *pflag.FlagSet) *e2bFlags {
	f := &e2bFlags{}
	fs.StringVar(&f.domain, "e2b-domain", "", "answer E2B's API on --listen for `DOMAIN` (api.DOMAIN and PORT-SANDBOXID.DOMAIN, by the Host header; "+
		"E2B's SDKs then work with E2B_DOMAIN=DOMAIN and a --token-file token as E2B_API_KEY); the operator provides wildcard DNS "+
		"and a certificate for *.DOMAIN (the self-signed one covers it)")
	return f
}

func (f *e2bFlags) check(listen string) error {
	if f.domain == "" {
		return nil
	}
	if listen == "" {
		return usagef("--e2b-domain needs --listen: E2B's SDKs reach the daemon over TLS")
	}
	d := strings.TrimSuffix(strings.ToLower(f.domain), ".")
	if len(d) > 200 || !strings.Contains(d, ".") || strings.ContainsAny(d, "/:*@ ") || strings.HasPrefix(d, ".") {
		return usagef("--e2b-domain %q: want a DNS name such as e2b.example.com (no scheme, port or wildcard)", f.domain)
	}
	f.domain = d
	return nil
}

// names are the self-signed certificate's extra names.
func (f *e2bFlags) names() []string {
	if f.domain == "" {
		return nil
	}
	return []string{f.domain, "*." + f.domain}
}

// wrap puts the E2B front end before next (cellvm's own API behind its
// token gate), routing by Host.
func (f *e2bFlags) wrap(next http.Handler, m sandbox.Manager, tokens *api.Tokens, stateDir string, log *slog.Logger) (http.Handler, error) {
	if f.domain == "" {
		return next, nil
	}
	key, err := e2bKey(filepath.Join(stateDir, "e2b", "token.key"))
	if err != nil {
		return nil, err
	}
	h, err := e2b.NewHandler(m, e2b.Options{Domain: f.domain, Tokens: tokens, Key: key, Next: next, Log: log})
	if err != nil {
		return nil, err
	}
	log.Info("serving E2B's API", "api", "api."+f.domain, "sandboxes", "PORT-SANDBOXID."+f.domain)
	return h, nil
}

// e2bKey reads the key that signs the sandboxes' access tokens, making it
// on first use: kept across restarts, so the tokens an SDK holds stay
// good while their sandboxes live.
func e2bKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		if len(b) < 32 {
			return nil, fmt.Errorf("%s: %d bytes, want 32 (remove it to make a new one)", path, len(b))
		}
		return b, nil
	}
	if !os.IsNotExist(err) {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return nil, err
	}
	return b, nil
}
