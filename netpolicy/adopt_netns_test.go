package netpolicy

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// TestPinsAcrossRestart: a daemon dies with addresses DNS opened; the
// kernel closes each at its own expiry while no daemon runs; the next
// daemon, taking the VM back under a new policy, keeps the pins not yet
// due whose names the new policy allows, until their old expiry, and cuts
// the flows the new policy refuses.
func TestPinsAcrossRestart(t *testing.T) {
	tn := newTestNet(t)
	h1 := testHost(t, tn)
	ctx := context.Background()
	gpath := tn.guest(1)
	g := nsRunner{gpath}
	a1, err := h1.Attach(ctx, "sb-pins", mustParse(t, "allowed.test", "short.test", "multi.test:443", "echo.test", "203.0.113.7"),
		WithVethPeer(gpath, "eth0"))
	if err != nil {
		t.Fatal(err)
	}
	configureGuest(t, gpath, a1)
	for name, want := range map[string]string{"allowed.test": "203.0.113.50", "short.test": "203.0.113.60", "multi.test": "203.0.113.51", "echo.test": "203.0.113.71"} {
		if _, addrs := lookup(t, g, a1.DNS, name); fmt.Sprint(addrs) != "["+want+"]" {
			t.Fatalf("%s: %v", name, addrs)
		}
	}
	mustReach(t, g, "203.0.113.60:80")
	revoked := openFlow(t, g, "tcp4", "203.0.113.71:7") // echo.test: not in the next policy
	kept := openFlow(t, g, "tcp4", "203.0.113.7:7")
	a1.mu.Lock()
	shortStop, allowedStop := a1.pins[netip.MustParseAddr("203.0.113.60")].stop, a1.pins[netip.MustParseAddr("203.0.113.50")].stop
	a1.mu.Unlock()

	// The daemon dies: its resolver and expiry loop stop, its rules stay.
	close(a1.stop)
	<-a1.done
	a1.dns.Close()
	for time.Now().Before(shortStop.Add(1500 * time.Millisecond)) { // xt_time has 1 s steps
		time.Sleep(100 * time.Millisecond)
	}
	mustRefuse(t, g, "203.0.113.60:80") // closed by the kernel on time
	mustReach(t, g, "203.0.113.50:80")  // not due yet

	h2 := testHost(t, tn)
	if err := h2.Sweep([]string{"sb-pins"}); err != nil {
		t.Fatal(err)
	}
	a2, err := h2.Attach(ctx, "sb-pins", mustParse(t, "allowed.test", "short.test", "203.0.113.7"))
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	a2.mu.Lock()
	var got []string
	for ip, p := range a2.pins {
		got = append(got, fmt.Sprintf("%v %v %v", ip, p.expires.Equal(allowedStop), p.names))
	}
	a2.mu.Unlock()
	if fmt.Sprint(got) != "[203.0.113.50 true map[allowed.test:true]]" {
		t.Errorf("pins after the restart: %v; want allowed.test's alone, until its old stop", got)
	}
	mustReach(t, g, "203.0.113.50:80")   // kept without a new lookup
	mustRefuse(t, g, "203.0.113.51:443") // multi.test no longer listed
	mustRefuse(t, g, "203.0.113.60:80")  // expired while the daemon was down
	mustBeCut(t, revoked)
	mustEcho(t, kept)
}
