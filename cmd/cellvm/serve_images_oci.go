package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cellvm/cellvm/image/oci"
	"github.com/cellvm/cellvm/sandbox/egress"
	"github.com/cellvm/cellvm/sandbox/engine"
)

// ociFetcher is the engine's registry client: package image/oci, with the
// daemon's rules on whose credentials and which addresses a pull may use.
// The operator's pulls use the host's registry logins (the docker config
// file of the daemon's user) and reach any address. A tenant's pull is
// anonymous unless it brings its own token, and dials public addresses
// only: a registry reference is a URL the daemon fetches, so without this
// a tenant could make the daemon fetch from the cloud's metadata service,
// the host's loopback services or the private network
// (--public-ranges makes a special range public here too, as it does for
// the sandboxes' egress).
type ociFetcher struct {
	public []netip.Prefix
}

func (f ociFetcher) Pull(ctx context.Context, ref string, o engine.FetchOptions) (*engine.FetchedImage, error) {
	im, err := oci.Pull(ctx, ref, f.options(o))
	return engine.FromOCI(ctx, im, err)
}

func (f ociFetcher) Import(ctx context.Context, r io.Reader, o engine.FetchOptions) (*engine.FetchedImage, error) {
	im, err := oci.Import(ctx, r, f.options(o))
	return engine.FromOCI(ctx, im, err)
}

func (f ociFetcher) options(o engine.FetchOptions) oci.Options {
	opt := oci.Options{Platform: o.Platform, Insecure: o.Insecure, Token: o.Token, MaxImageBytes: o.MaxBytes,
		TempDir: o.TempDir, Progress: o.Progress}
	if o.Operator {
		opt.Keychain = authn.DefaultKeychain
		return opt
	}
	opt.Keychain = authn.NewMultiKeychain() // anonymous: never the operator's logins
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: f.refusePrivate}
	t.DialContext = d.DialContext
	t.Proxy = nil // a proxy would dial for it, past the check
	if o.Insecure {
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the request asked for an insecure registry
	}
	opt.Transport = t
	return opt
}

// refusePrivate is the tenant's dialer's check, on the address actually
// dialled (after DNS): a special-purpose range (egress.SpecialRanges:
// private, loopback, link-local, metadata, ...) or any IPv6 address that
// is not global unicast is refused, unless --public-ranges names it.
func (f ociFetcher) refusePrivate(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("registry address %q: %w", address, err)
	}
	ip := ap.Addr().Unmap()
	for _, p := range f.public {
		if p.Contains(ip) {
			return nil
		}
	}
	if ip.Is6() {
		if !ip.IsGlobalUnicast() || ip.IsPrivate() {
			return fmt.Errorf("registry address %s is not a public address; a tenant's pull reaches public registries only", ip)
		}
		return nil
	}
	for _, s := range egress.SpecialRanges {
		if s.Prefix.Contains(ip) {
			return fmt.Errorf("registry address %s is in %s (%s); a tenant's pull reaches public registries only", ip, s.Prefix, s.What)
		}
	}
	return nil
}
