package netpolicy

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for the host's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestChainPositionHeld: another manager inserts rules above cellvm's
// jumps; within the check period the jumps are back on top, the other
// rules are still there below them, and each repair is logged.
func TestChainPositionHeld(t *testing.T) {
	tn := newTestNet(t)
	var logs syncBuffer
	h, err := NewHost(HostConfig{
		NetNS: tn.nsPath(tn.host), Uplink: "up0", Upstreams: []string{"203.0.113.53:53"},
		PositionCheck: 200 * time.Millisecond, PublicRanges: testPublic,
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	run := func(args ...string) string {
		return sh(t, append([]string{"ip", "netns", "exec", tn.host}, args...)...)
	}
	intruders := []struct {
		tool, table, chain, spec, jump string
	}{
		{"iptables", "filter", "FORWARD", "-j ACCEPT", "-A FORWARD -j " + fwdChain},
		{"iptables", "filter", "INPUT", "-p tcp -j ACCEPT", "-A INPUT -j " + inChain},
		{"iptables", "nat", "POSTROUTING", "-j RETURN", "-A POSTROUTING -j " + postChain},
		{"iptables", "raw", "PREROUTING", "-j ACCEPT", "-A PREROUTING -j " + preChain},
		{"ip6tables", "filter", "FORWARD", "-j ACCEPT", "-A FORWARD -j " + ip6Chain},
	}
	for _, in := range intruders {
		run(append([]string{in.tool, "-t", in.table, "-I", in.chain, "1"}, strings.Fields(in.spec)...)...)
	}
	deadline := time.Now().Add(30 * time.Second) // generous: the period is 200 ms
	for _, in := range intruders {
		for {
			rules := aRules(run(in.tool, "-t", in.table, "-S", in.chain))
			if len(rules) >= 2 && rules[0] == in.jump {
				if rules[1] != "-A "+in.chain+" "+in.spec {
					t.Errorf("%s %s: the other manager's rule is not right below: %q", in.tool, in.chain, rules)
				}
				if strings.Count(strings.Join(rules, "\n"), in.jump) != 1 {
					t.Errorf("%s %s: the jump is there more than once: %q", in.tool, in.chain, rules)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s: jump not back on top: %q", in.tool, in.chain, rules)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := strings.Count(logs.String(), "the jump is back on top"); n != len(intruders) {
		t.Errorf("%d repairs logged, want %d:\n%s", n, len(intruders), logs.String())
	}

	// A daemon that starts finds its jump below another rule: it is back
	// on top when NewHost returns.
	h.Close()
	run("iptables", "-I", "FORWARD", "1", "-j", "DROP")
	h2 := testHost(t, tn)
	defer h2.Close()
	if rules := aRules(run("iptables", "-S", "FORWARD")); len(rules) < 2 || rules[0] != "-A FORWARD -j "+fwdChain || rules[1] != "-A FORWARD -j DROP" {
		t.Errorf("FORWARD after a start: %q", rules)
	}
}

// aRules are the rules ("-A ...") of an iptables -S listing.
func aRules(listing string) []string {
	var out []string
	for _, l := range strings.Split(listing, "\n") {
		if strings.HasPrefix(l, "-A ") {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}
