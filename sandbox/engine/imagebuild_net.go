package engine

import (
	"fmt"
	"net"
	"net/url"
	"slices"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/egress"
)

// The builder VM has no network device unless a step needs one: an apt
// step (its mirror, or without one Debian's own hosts, deb.debian.org and
// security.debian.org, which a Debian base's sources.list names: a base
// whose sources name other hosts needs a mirror) or a pip step with an
// index (its host, and files.pythonhosted.org for pypi.org, where PyPI's
// files are). The policy then allows exactly those hosts on their ports,
// through the daemon's pinning DNS proxy; the operator's egress deny
// rules and --public-ranges apply as to any sandbox of the tenant, and
// the metadata and private ranges stay closed. A pull's or an import's
// build has no steps, and so no network.

// debianHosts are where apt goes without a mirror.
var debianHosts = []string{"deb.debian.org", "security.debian.org"}

// buildNetwork is the allowlist of steps ("" entries: none).
func buildNetwork(steps []sandbox.RecipeStep) ([]string, error) {
	var allow []string
	add := func(e string) {
		if !slices.Contains(allow, e) {
			allow = append(allow, e)
		}
	}
	for i, s := range steps {
		switch s.Kind() {
		case "apt":
			if s.Mirror == "" {
				for _, h := range debianHosts {
					add(h + ":80")
					add(h + ":443")
				}
				continue
			}
			e, err := urlEntry(s.Mirror)
			if err != nil {
				return nil, fmt.Errorf("%w: step %d: mirror: %v", sandbox.ErrInvalid, i+1, err)
			}
			add(e)
		case "pip":
			if s.PipIndex == "" {
				continue
			}
			e, err := urlEntry(s.PipIndex)
			if err != nil {
				return nil, fmt.Errorf("%w: step %d: pip_index: %v", sandbox.ErrInvalid, i+1, err)
			}
			add(e)
			if u, _ := url.Parse(s.PipIndex); u != nil && u.Hostname() == "pypi.org" {
				add("files.pythonhosted.org:443")
			}
		}
	}
	return allow, nil
}

// urlEntry is the allowlist entry of an http or https URL: its host and
// port.
func urlEntry(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || u.Hostname() == "" {
		return "", fmt.Errorf("%q has no host", clip(v, 64))
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.To4() == nil {
		return "", fmt.Errorf("%q: the guest's network is IPv4 only", clip(v, 64))
	}
	return u.Hostname() + ":" + port, nil
}

// buildPolicy parses steps' allowlist.
func buildPolicy(steps []sandbox.RecipeStep) (egress.Policy, error) {
	allow, err := buildNetwork(steps)
	if err != nil || len(allow) == 0 {
		return egress.Policy{}, err
	}
	p, err := egress.Parse(allow)
	if err != nil {
		return egress.Policy{}, fmt.Errorf("%w: the build's network: %v", sandbox.ErrInvalid, err)
	}
	return p, nil
}
