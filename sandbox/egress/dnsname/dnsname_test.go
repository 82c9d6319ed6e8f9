package dnsname

import (
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestLabels(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, c := range []struct {
		name string
		want string // labels joined by " | "; "!" for malformed
	}{
		{"example.com", "example | com"},
		{"Example.COM.", "example | com"},
		{`x\.example.com`, "x.example | com"},
		{`x\.example.com.`, "x.example | com"},
		{`a\\b.com`, `a\b | com`},
		{`\065bc.com`, "abc | com"}, // \065 is 'A', lowered
		{`a\032b.com`, "a b | com"},
		{`a\000.com`, "a\x00 | com"},
		{`\046.com`, ". | com"}, // \046 is a dot, inside the label
		{`a\"b.com`, `a"b | com`},
		{".", ""},
		{"", "!"},
		{"..", "!"},
		{".com", "!"},
		{"a..com", "!"},
		{`a\`, "!"},
		{`a\25`, "!"},
		{`a\256.com`, "!"},
		{`a\2x5.com`, "!"},
		{long + ".com", long + " | com"},
		{long + "a.com", "!"},
		{strings.Repeat(long+".", 3) + strings.Repeat("b", 61), strings.Repeat(long+" | ", 3) + strings.Repeat("b", 61)},
		{strings.Repeat(long+".", 3) + strings.Repeat("b", 62), "!"}, // 256 bytes on the wire
	} {
		labels, ok := Labels(c.name)
		got := strings.Join(labels, " | ")
		if !ok {
			got = "!"
		}
		if got != c.want {
			t.Errorf("Labels(%q) = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestHost(t *testing.T) {
	for name, want := range map[string]string{
		"PyPI.org.":         "pypi.org",
		"_srv.example.net":  "_srv.example.net",
		`\065.example.com`:  "a.example.com",
		`x\.example.com`:    "!",
		`a\032b.com`:        "!",
		`a\000.com`:         "!",
		"a*.example.com":    "!",
		".":                 "!",
		"xn--bcher-kva.com": "xn--bcher-kva.com",
	} {
		got, ok := Host(name)
		if !ok {
			got = "!"
		}
		if got != want {
			t.Errorf("Host(%q) = %q, want %q", name, got, want)
		}
	}
}

// FuzzLabels checks Labels against miekg/dns, the library that turns the
// guest's wire names into the presentation form the resolver reads: where
// both read a name they read the same labels, and every name miekg/dns
// writes out of a wire name reads back as that wire name's labels.
func FuzzLabels(f *testing.F) {
	for _, s := range []string{"example.com.", `x\.example.com.`, `\065\066.c.`, `a\\.b.`, ".", `a\255.b.`, "A.B.C.", `\0.`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		labels, ok := Labels(name)
		if h, hok := Host(name); hok && (!ok || h != strings.Join(labels, ".")) {
			t.Fatalf("Host(%q) = %q but Labels = %q, %v", name, h, labels, ok)
		}
		if !dns.IsFqdn(name) || !printableASCII(name) {
			// miekg/dns writes wire names in printable ASCII (other
			// bytes as \DDD), and reads other bytes inconsistently
			// (IsFqdn counts escapes in bytes after a multi-byte rune).
			return
		}
		buf := make([]byte, 512)
		n, err := dns.PackDomainName(name, buf, 0, nil, false)
		if err != nil || n > 255 {
			return
		}
		var want []string
		for off := 0; off < n && buf[off] != 0; off += 1 + int(buf[off]) {
			want = append(want, asciiLower(buf[off+1:off+1+int(buf[off])]))
		}
		if ok && fmt.Sprintf("%q", labels) != fmt.Sprintf("%q", want) {
			t.Fatalf("Labels(%q) = %q; miekg/dns packs %q", name, labels, want)
		}
		canon, _, err := dns.UnpackDomainName(buf[:n], 0)
		if err != nil {
			t.Fatalf("miekg/dns cannot unpack what it packed from %q: %v", name, err)
		}
		got, ok := Labels(canon)
		if !ok || fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Fatalf("Labels(%q) (miekg/dns's form of %q) = %q, %v; want %q", canon, name, got, ok, want)
		}
	})
}

func asciiLower(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return string(out)
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
