package egress

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseAccepts(t *testing.T) {
	p, err := Parse([]string{
		"pypi.org", "*.pythonhosted.org", "203.0.113.7", "198.51.100.0/24:443",
		"Files.Example.COM.", "api.example.com:8443", "10.1.2.3", "0.0.0.0/0", "_srv.example.net",
	})
	if err != nil {
		t.Fatal(err)
	}
	wantNets := []NetRule{
		{Prefix: netip.MustParsePrefix("203.0.113.7/32")},
		{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Port: 443},
		{Prefix: netip.MustParsePrefix("10.1.2.3/32")},
		{Prefix: netip.MustParsePrefix("0.0.0.0/0")},
	}
	if !reflect.DeepEqual(p.Nets, wantNets) {
		t.Errorf("Nets = %+v, want %+v", p.Nets, wantNets)
	}
	wantNames := []NameRule{
		{Name: "pypi.org"},
		{Name: "pythonhosted.org", Wildcard: true},
		{Name: "files.example.com"},
		{Name: "api.example.com", Port: 8443},
		{Name: "_srv.example.net"},
	}
	if !reflect.DeepEqual(p.Names, wantNames) {
		t.Errorf("Names = %+v, want %+v", p.Names, wantNames)
	}
	if got := p.Entries(); len(got) != 9 || got[4] != "Files.Example.COM." {
		t.Errorf("Entries = %q", got)
	}
	if p.Empty() {
		t.Error("Empty() on a policy with entries")
	}
}

func TestParseEmpty(t *testing.T) {
	for _, in := range [][]string{nil, {}} {
		p, err := Parse(in)
		if err != nil || !p.Empty() {
			t.Errorf("Parse(%q) = %+v, %v; want empty, nil", in, p, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	long := strings.Repeat("a", 63)
	cases := []struct {
		entry, want string
	}{
		{"", "empty entry"},
		{" pypi.org", "white space"},
		{"10.0.0.0/33", "malformed CIDR"},
		{"10.0.0.0/x", "malformed CIDR"},
		{"300.1.2.3/8", "malformed CIDR"},
		{"10.0.0.1/8", "host bits set"},
		{"198.51.100.0/24:0", "out of range"},
		{"198.51.100.0/24:65536", "out of range"},
		{"203.0.113.7:99999999999999999999", "out of range"},
		{"pypi.org:", "empty port"},
		{"pypi.org:https", "not a number"},
		{"pypi.org:-1", "not a number"},
		{":443", "port without a destination"},
		{"*.", "empty wildcard"},
		{"*", "wildcard"},
		{"*.*.example.com", `"*" is only allowed`},
		{"a.*.example.com", `"*" is only allowed`},
		{"*foo.example.com", "wildcard"},
		{"*.com", "top-level domain"},
		{"foo..com", "empty label"},
		{".com", "empty label"},
		{"-foo.com", "not allowed"},
		{"foo-.com", "not allowed"},
		{"fo o.com", "not allowed"},
		{"foo.com/", "malformed CIDR"},
		{long + "a.com", "label longer than 63"},
		{strings.Repeat(long+".", 4) + "com", "bytes"},
		{"1.2.3", "all-numeric"},
		{"1.2.3.4.5", "all-numeric"},
		{"2001:db8::1", "IPv6"},
		{"[2001:db8::1]:443", "IPv6"},
		{"2001:db8::/32", "IPv6"},
		{"::ffff:1.2.3.4", "IPv6"},
		{"127.0.0.1", "never a destination"},
		{"0.0.0.0", "never a destination"},
		{"224.0.0.1", "never a destination"},
		{"240.0.0.0/4", "never a destination"},
		{"255.255.255.255", "never a destination"},
		{"a:b:443", "IPv6"},
	}
	for _, c := range cases {
		_, err := Parse([]string{"pypi.org", c.entry})
		if err == nil {
			t.Errorf("Parse(%q) succeeded", c.entry)
			continue
		}
		if !errors.Is(err, ErrInvalidPolicy) {
			t.Errorf("Parse(%q) = %v, not ErrInvalidPolicy", c.entry, err)
		}
		if !strings.Contains(err.Error(), "allow[1]") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %q, want it to name allow[1] and say %q", c.entry, err, c.want)
		}
	}
}

func TestParseTooMany(t *testing.T) {
	in := make([]string, MaxEntries+1)
	for i := range in {
		in[i] = "example.com"
	}
	if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), "at most 256") {
		t.Errorf("Parse of %d entries = %v", len(in), err)
	}
	if _, err := Parse(in[:MaxEntries]); err != nil {
		t.Errorf("Parse of %d entries: %v", MaxEntries, err)
	}
}

func TestParseTooLong(t *testing.T) {
	e := strings.Repeat("a", MaxEntryBytes+1)
	if _, err := Parse([]string{e}); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Errorf("Parse of a %d-byte entry = %v", len(e), err)
	}
}

func TestNamePorts(t *testing.T) {
	p, err := Parse([]string{"pypi.org", "*.example.com:443", "api.example.com:8443", "*.example.com:80"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		ok    bool
		ports []uint16
	}{
		{"pypi.org", true, nil},
		{"PyPI.org.", true, nil},
		{"www.pypi.org", false, nil},
		{"xpypi.org", false, nil},
		{"example.com", false, nil},
		{"a.example.com", true, []uint16{443, 80}},
		{"a.b.example.com", true, []uint16{443, 80}},
		{"api.example.com", true, []uint16{443, 8443, 80}},
		{"badexample.com", false, nil},
		{"", false, nil},
		{".", false, nil},
		// Labels, not strings: an escaped dot is inside a label.
		{`x\.example.com`, false, nil},                // "x.example" under com
		{`a\.b.example.com`, true, []uint16{443, 80}}, // "a.b" under example.com
		{`example\.com`, false, nil},
		{`pypi\.org`, false, nil},
		{`api.example\.com`, false, nil},
		{`\097pi.example.com`, true, []uint16{443, 8443, 80}}, // \097 is "a": api.example.com
		{`\080yPI.org`, true, nil},                            // \080 is "P"
		{"API.EXAMPLE.COM.", true, []uint16{443, 8443, 80}},
		{"a..example.com", false, nil},
		{`a\`, false, nil},
	}
	for _, c := range cases {
		ports, ok := p.NamePorts(c.name)
		if ok != c.ok || !reflect.DeepEqual(ports, c.ports) {
			t.Errorf("NamePorts(%q) = %v, %v; want %v, %v", c.name, ports, ok, c.ports, c.ok)
		}
	}
}
