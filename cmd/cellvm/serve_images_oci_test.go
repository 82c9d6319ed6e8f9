package main

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cellvm/cellvm/sandbox/engine"
)

// TestTenantPullsReachPublicRegistriesOnly: the operator's pull reaches a
// registry on loopback; a tenant's pull of the same reference is refused
// at the dial, naming the range (a registry reference is a URL the daemon
// fetches: a tenant must not make it fetch from the host's own services
// or the cloud's metadata); --public-ranges opens a range for tenants too.
func TestTenantPullsReachPublicRegistriesOnly(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/probe:1"
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pull := func(f ociFetcher, operator bool) error {
		im, err := f.Pull(ctx, ref, engine.FetchOptions{Insecure: true, Operator: operator})
		if err == nil {
			im.Close()
		}
		return err
	}
	if err := pull(ociFetcher{}, true); err != nil {
		t.Fatalf("the operator's pull from loopback: %v", err)
	}
	err = pull(ociFetcher{}, false)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.0/8") || !strings.Contains(err.Error(), "public registries only") {
		t.Fatalf("a tenant's pull from loopback: %v; want a refusal naming 127.0.0.0/8", err)
	}
	if err := pull(ociFetcher{public: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, false); err != nil {
		t.Fatalf("a tenant's pull from loopback made public by --public-ranges: %v", err)
	}
	for _, a := range []string{"169.254.169.254:80", "10.1.2.3:443", "[::1]:5000", "[fe80::1]:80"} {
		if err := (ociFetcher{}).refusePrivate("tcp", a, nil); err == nil {
			t.Errorf("a tenant's dial of %s was allowed", a)
		}
	}
	if err := (ociFetcher{}).refusePrivate("tcp", "93.184.215.14:443", nil); err != nil {
		t.Errorf("a tenant's dial of a public address: %v", err)
	}
}
