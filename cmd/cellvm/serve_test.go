package main

import (
	"strings"
	"testing"
)

// Errors in serve's network flags come before anything starts.
func TestServeBadNetworkFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--public-ranges", "bogus"}, "want a CIDR prefix"},
		{[]string{"serve", "--public-ranges", "192.0.2.0/24,"}, "want a CIDR prefix"},
		{[]string{"serve", "--network=false", "--public-ranges", "192.0.2.0/24"}, "--public-ranges needs --network"},
		{[]string{"serve", "--dns-upstream", "192.0.2.53"}, "want IP:PORT"},
		{[]string{"serve", "--dns-upstream", "resolver.example:53"}, "want IP:PORT"},
		{[]string{"serve", "--network=false", "--dns-upstream", "192.0.2.53:53"}, "--dns-upstream needs --network"},
	} {
		var out, errb strings.Builder
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.msg)
		}
	}
	var l prefixList
	if err := l.Set("192.0.2.0/24, 198.51.100.0/24"); err != nil || l.String() != "192.0.2.0/24,198.51.100.0/24" {
		t.Errorf("prefixList: %v %q", err, l.String())
	}
}
