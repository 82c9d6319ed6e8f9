package main

import (
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/cellvm/cellvm/sandbox/egress"
)

// fakeInterfaces is a host at 203.0.113.10 on 203.0.113.0/26.
func fakeInterfaces() ([]netip.Addr, []netip.Prefix, error) {
	return []netip.Addr{netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("127.0.0.1")},
		[]netip.Prefix{netip.MustParsePrefix("203.0.113.0/26"), netip.MustParsePrefix("127.0.0.0/8")}, nil
}

// egressRules parses args as serve's egress flags and resolves them.
func egressRules(t *testing.T, public []netip.Prefix, args ...string) (*egressOptions, string) {
	t.Helper()
	var e egressOptions
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	e.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	var logb strings.Builder
	if err := e.resolve(slog.New(slog.NewTextHandler(&logb, nil)), public, fakeInterfaces); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return &e, logb.String()
}

func TestEgressFlags(t *testing.T) {
	refused := func(g egress.Guard, entries ...string) {
		t.Helper()
		for _, e := range entries {
			if err := g.Check([]string{e}); !errors.Is(err, egress.ErrDenied) {
				t.Errorf("%s: %v, want refused", e, err)
			}
		}
	}
	passed := func(g egress.Guard, entries ...string) {
		t.Helper()
		for _, e := range entries {
			if err := g.Check([]string{e}); err != nil {
				t.Errorf("%s: %v, want it to pass", e, err)
			}
		}
	}

	// No flags: the default list, with the host's address and network.
	e, log := egressRules(t, nil)
	refused(e.guard, "169.254.169.254", "10.0.0.0/8", "192.168.1.1", "100.100.100.200", "203.0.113.10", "203.0.113.20", "127.0.0.1")
	passed(e.guard, "0.0.0.0/0", "8.8.8.8", "203.0.113.64")
	if err := e.guard.Check([]string{"0.0.0.0/0", "169.254.169.254/32"}); !errors.Is(err, egress.ErrDenied) {
		t.Errorf("0.0.0.0/0 with 169.254.169.254/32: %v, want refused", err)
	}
	if !strings.Contains(log, "egress_deny=") || !strings.Contains(log, "10.0.0.0/8") || !strings.Contains(log, "203.0.113.0/26") {
		t.Errorf("the log does not show the deny list:\n%s", log)
	}

	// A list replaces the default, but never drops link-local and metadata.
	e, _ = egressRules(t, nil, "--egress-deny", "198.18.0.0/15")
	refused(e.guard, "198.18.0.1", "169.254.169.254", "169.254.1.1", "100.100.100.200", "168.63.129.16")
	passed(e.guard, "10.0.0.1", "203.0.113.10")

	// "default" adds to the default.
	e, _ = egressRules(t, nil, "--egress-deny", "default,198.18.0.0/15")
	refused(e.guard, "198.18.0.1", "10.0.0.1", "203.0.113.10")

	// --egress-allow-private opens a range for everyone, not metadata.
	e, log = egressRules(t, nil, "--egress-allow-private", "10.20.0.0/16", "--egress-allow-private", "169.254.0.0/16")
	passed(e.guard, "10.20.0.0/16", "10.20.1.2:5432", "169.254.1.1")
	refused(e.guard, "10.21.0.1", "169.254.169.254")
	if !strings.Contains(log, "egress_allow_private=10.20.0.0/16,169.254.0.0/16") {
		t.Errorf("the log does not show the allow-private ranges:\n%s", log)
	}

	// A public range the rules close is warned of.
	_, log = egressRules(t, []netip.Prefix{netip.MustParsePrefix("10.5.0.0/16"), netip.MustParsePrefix("198.51.100.0/24")})
	if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "public_range=10.5.0.0/16") || strings.Contains(log, "public_range=198.51.100.0/24") {
		t.Errorf("want a warning for 10.5.0.0/16 only:\n%s", log)
	}
	_, log = egressRules(t, []netip.Prefix{netip.MustParsePrefix("10.5.0.0/16")}, "--egress-allow-private", "10.5.0.0/16")
	if strings.Contains(log, "level=WARN") {
		t.Errorf("a public range also opened by --egress-allow-private is warned of:\n%s", log)
	}
}

func TestEgressFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--egress-deny", "bogus"}, `range "bogus": want a CIDR prefix`},
		{[]string{"serve", "--egress-deny", "10.0.0.1/8"}, "did you mean 10.0.0.0/8"},
		{[]string{"serve", "--egress-deny", "10.0.0.0/8,"}, `range "": empty`},
		{[]string{"serve", "--egress-allow-private", "default"}, `range "default": want a CIDR prefix`},
	} {
		var out, errb strings.Builder
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.msg)
		}
	}
}

// TestHostInterfaces reads this host's interfaces (read-only): loopback
// is among them.
func TestHostInterfaces(t *testing.T) {
	addrs, nets, err := hostInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	lo := false
	for _, a := range addrs {
		lo = lo || a == netip.MustParseAddr("127.0.0.1")
	}
	if !lo || len(nets) == 0 {
		t.Errorf("addresses %v, networks %v: want 127.0.0.1 among them", addrs, nets)
	}
	for _, n := range nets {
		if n != n.Masked() {
			t.Errorf("network %v has host bits", n)
		}
	}
}
