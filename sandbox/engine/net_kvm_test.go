package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/netpolicy"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/stwguard"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/test/netnstest"
)

// Test servers on documentation addresses, inside a "world" network
// namespace the test makes: traffic never leaves this machine (the rig's L1).
const (
	allowedServer  = "198.51.100.10"
	unlistedServer = "203.0.113.10"
	worldNS        = "cellvm-test-world"
)

// metadataServers stand in for the clouds' metadata and wire servers: in
// the world, reachable from the host, refused to every guest.
var metadataServers = []string{"169.254.169.254", "168.63.129.16", "192.0.0.192", "100.100.100.200"}

// worldRanges are the documentation ranges the world's servers live in:
// denied by default, public in the test's world.
var worldRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}

func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// makeWorld builds the world namespace with both servers and routes to it
// from this namespace through a veth ("uplink" 192.0.2.1 <-> 192.0.2.2).
// "This namespace" is the test's own (netnstest.Isolate), never the host's.
func makeWorld(t *testing.T) {
	t.Helper()
	if !netnstest.InChild() {
		t.Fatal("makeWorld outside a namespace of the test's own would change the host's routes")
	}
	exec.Command("ip", "netns", "del", worldNS).Run()
	exec.Command("ip", "link", "del", "cvt-up").Run()
	ip(t, "netns", "add", worldNS)
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", worldNS).Run()
		exec.Command("ip", "link", "del", "cvt-up").Run()
	})
	ip(t, "link", "add", "cvt-up", "type", "veth", "peer", "name", "cvt-down")
	ip(t, "link", "set", "cvt-down", "netns", worldNS)
	ip(t, "addr", "add", "192.0.2.1/24", "dev", "cvt-up")
	ip(t, "link", "set", "cvt-up", "up")
	ip(t, "-n", worldNS, "addr", "add", "192.0.2.2/24", "dev", "cvt-down")
	ip(t, "-n", worldNS, "addr", "add", allowedServer+"/32", "dev", "cvt-down")
	ip(t, "-n", worldNS, "addr", "add", unlistedServer+"/32", "dev", "cvt-down")
	for _, a := range metadataServers {
		ip(t, "-n", worldNS, "addr", "add", a+"/32", "dev", "cvt-down")
		ip(t, "route", "replace", a+"/32", "via", "192.0.2.2")
	}
	ip(t, "-n", worldNS, "link", "set", "cvt-down", "up")
	ip(t, "-n", worldNS, "link", "set", "lo", "up")
	ip(t, "route", "replace", "198.51.100.0/24", "via", "192.0.2.2")
	ip(t, "route", "replace", "203.0.113.0/24", "via", "192.0.2.2")
	srv := exec.Command("ip", "netns", "exec", worldNS, os.Args[0])
	srv.Env = append(os.Environ(), "CELLVM_TEST_WORLD=1")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	for _, addr := range append([]string{allowedServer, unlistedServer}, metadataServers...) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			c, err := net.DialTimeout("tcp", addr+":80", time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("world server %s not reachable from the host: %v", addr, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// worldServer is the test binary's role inside the world namespace: HTTP
// on port 80, TCP echo on port 7.
func worldServer() {
	if l, err := net.Listen("tcp", ":7"); err == nil {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); io.Copy(c, c) }()
			}
		}()
	}
	http.ListenAndServe(":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s", strings.Split(r.Host, ":")[0])
	}))
}

func TestMain(m *testing.M) {
	// This binary is the daemon in its tests, as cellvm is in production
	// (main.go): the same guard against a minute-long stop-the-world.
	stwguard.Start()
	if os.Getenv("CELLVM_TEST_WORLD") == "1" {
		worldServer()
		return
	}
	if dir := os.Getenv(envCrashingManager); dir != "" {
		os.Exit(crashingManager(dir))
	}
	switch os.Getenv("CELLVM_TEST_FAKE_VMM") {
	case "agent":
		os.Exit(fakeAgentVMM(os.Args[1:]))
	case "hostile":
		os.Exit(fakeHostileVMM(os.Args[1:]))
	case "pausable":
		os.Exit(fakePausableVMM(os.Args[1:]))
	case "ending":
		os.Exit(fakeEndingVMM(os.Args[1:]))
	case "builder":
		os.Exit(fakeBuilderVMM(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// netRigManager is a rig manager that enforces network policies, with the
// world around it, in a network namespace of the test's own: the uplink,
// the world's routes, the TAP, the iptables chains and ip_forward never
// touch the host's (where 192.0.2.0/24 may be the real uplink). In the
// parent process it runs the test in that namespace (netnstest.Isolate)
// and returns nil: the caller returns at once.
func netRigManager(t *testing.T) *VMManager {
	t.Helper()
	kvmtest.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for TAPs and iptables")
	}
	if !netnstest.Isolate(t) {
		return nil
	}
	makeWorld(t)
	host, err := netpolicy.NewHost(netpolicy.HostConfig{Uplink: "cvt-up", Upstreams: []string{"192.0.2.2:53"}, PublicRanges: worldRanges}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	m := newRigManager(t)
	m.opt.Net = host
	return m
}

func TestNetworkPolicyInMicroVM(t *testing.T) {
	m := netRigManager(t)
	if m == nil {
		return
	}
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512, Network: &sandbox.NetworkPolicy{Allow: []string{allowedServer}}})
	if err != nil {
		t.Fatal(err)
	}
	fetch := "import urllib.request, time\nt0 = time.time()\ntry:\n    r = urllib.request.urlopen('http://%s/', timeout=30).read().decode()\nexcept Exception as e:\n    r = 'ERR ' + type(e).__name__ + ' ' + str(e)\nprint(r)\nprint('SECONDS', round(time.time() - t0, 2))"
	r := runCell(t, m, info.ID, fmt.Sprintf(fetch, allowedServer), time.Minute)
	if r.Status != cell.StatusOK || !strings.Contains(r.Stdout, "hello from "+allowedServer) {
		t.Errorf("allowed server: %+v", r)
		er, err := m.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "ip neigh; cat /proc/interrupts; dmesg | grep -i -E \"virtio|irq|eth0|net\" | tail -30"}, Timeout: time.Minute})
		t.Logf("guest network: %v\n%s%s", err, er.Stdout, er.Stderr)
		out, _ := exec.Command("sh", "-c", "ip addr; ip route; iptables-save | head -80; ip neigh").CombinedOutput()
		t.Logf("host network:\n%s", out)
		t.Logf("console:\n%s", consoleTail(m.sandboxDir(info.ID), 6000))
	}
	r = runCell(t, m, info.ID, fmt.Sprintf(fetch, unlistedServer), time.Minute)
	if !strings.Contains(r.Stdout, "ERR") {
		t.Errorf("unlisted server reachable: %q", r.Stdout)
	}
	var secs float64
	fmt.Sscanf(r.Stdout[strings.Index(r.Stdout, "SECONDS"):], "SECONDS %g", &secs)
	if secs > 5 {
		t.Errorf("unlisted server took %.1f s to fail, want < 5 s", secs)
	}
	t.Logf("unlisted: %s", strings.TrimSpace(r.Stdout))
	got, _ := m.Get(ctx, info.ID)
	if got.Network.DroppedPackets == 0 {
		t.Errorf("no dropped packets counted: %+v", got.Network)
	}
	tag := netpolicy.Tag(info.ID)
	if t.Failed() { // the sandbox's logs go with it
		kvmtest.LogSandboxTails(t, m.opt.StateDir)
	}
	if err := m.Delete(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "-o", "link").Output(); strings.Contains(string(out), "cvm-"+tag) {
		t.Errorf("TAP cvm-%s left after delete", tag)
	}
	if out, _ := exec.Command("iptables-save").Output(); strings.Contains(string(out), "CELLVM-"+tag) {
		t.Errorf("iptables chains CELLVM-%s left after delete", tag)
	}
}

// TestForkOfANetworkedSandbox: a fork of a sandbox with a network gets a
// TAP and an address of its own and enforces its own policy, the
// request's (the parent allows one server, its fork only the other), or
// else its parent's; the parent keeps its address and policy. A policy for
// a fork of a machine without a NIC is refused and leaves nothing behind.
func TestForkOfANetworkedSandbox(t *testing.T) {
	m := netRigManager(t)
	if m == nil {
		return
	}
	ctx := context.Background()
	fetch := func(id, server string) string {
		t.Helper()
		code := fmt.Sprintf("import urllib.request\ntry:\n    r = urllib.request.urlopen('http://%s/', timeout=5).read().decode()\nexcept Exception as e:\n    r = 'ERR ' + type(e).__name__\nprint(r)", server)
		return strings.TrimSpace(runCell(t, m, id, code, time.Minute).Stdout)
	}
	// The guest's own address, as its routing table chooses it.
	guestAddr := func(id string) string {
		t.Helper()
		return mainText(t, m, id, fmt.Sprintf("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.connect(('%s', 80))\ns.getsockname()[0]", allowedServer))
	}
	hostAddr := func(id string) string {
		t.Helper()
		s, err := m.get(id)
		if err != nil || s.net == nil {
			t.Fatalf("sandbox %s has no network: %v", id, err)
		}
		return "'" + s.net.GuestAddr.Addr().String() + "'"
	}
	parent, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512, Network: &sandbox.NetworkPolicy{Allow: []string{allowedServer}}})
	if err != nil {
		t.Fatal(err)
	}
	runCell(t, m, parent.ID, "x = 41", time.Minute)
	if got := fetch(parent.ID, allowedServer); !strings.Contains(got, "hello from "+allowedServer) {
		t.Fatalf("parent to its allowed server: %q", got)
	}
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	own, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID, Network: &sandbox.NetworkPolicy{Allow: []string{unlistedServer}}})
	if err != nil {
		t.Fatalf("fork with its own policy: %v", err)
	}
	inherited, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("fork with its parent's policy: %v", err)
	}
	addrs := map[string]string{}
	for _, id := range []string{parent.ID, own.ID, inherited.ID} {
		got, want := guestAddr(id), hostAddr(id)
		if got != want {
			t.Errorf("sandbox %s's guest uses address %s, its TAP's is %s", id, got, want)
		}
		if other, dup := addrs[got]; dup {
			t.Errorf("sandboxes %s and %s share the address %s", other, id, got)
		}
		addrs[got] = id
		if x := mainText(t, m, id, "x"); x != "41" {
			t.Errorf("sandbox %s: x = %s, want the snapshot's 41", id, x)
		}
	}
	for _, c := range []struct {
		id, name, server string
		reach            bool
	}{
		{own.ID, "fork with its own policy", unlistedServer, true},
		{own.ID, "fork with its own policy", allowedServer, false},
		{inherited.ID, "fork with its parent's policy", allowedServer, true},
		{inherited.ID, "fork with its parent's policy", unlistedServer, false},
		{parent.ID, "parent", allowedServer, true},
		{parent.ID, "parent", unlistedServer, false},
	} {
		got := fetch(c.id, c.server)
		if reached := strings.Contains(got, "hello from "+c.server); reached != c.reach {
			t.Errorf("%s (%s) to %s: %q, want reachable %v", c.name, c.id, c.server, got, c.reach)
		}
	}
	if got, _ := m.Get(ctx, own.ID); got.Network.DroppedPackets == 0 {
		t.Errorf("the fork with its own policy counted no dropped packets: %+v", got.Network)
	}

	plain, err := m.Create(ctx, sandbox.Config{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	plainSnap, err := m.Snapshot(ctx, plain.ID)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := m.List(ctx)
	if _, err := m.Create(ctx, sandbox.Config{Snapshot: plainSnap.ID, Network: &sandbox.NetworkPolicy{Allow: []string{allowedServer}}}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a policy for a fork of a machine without a NIC: %v, want ErrInvalid", err)
	}
	if after, _ := m.List(ctx); len(after) != len(before) {
		t.Errorf("a refused fork left a sandbox: %d before, %d after", len(before), len(after))
	}
	if t.Failed() {
		kvmtest.LogSandboxTails(t, m.opt.StateDir)
	}
	for _, id := range []string{parent.ID, own.ID, inherited.ID, plain.ID} {
		if err := m.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
	}
	links, _ := exec.Command("ip", "-o", "link").Output()
	rules, _ := exec.Command("iptables-save").Output()
	for _, id := range []string{parent.ID, own.ID, inherited.ID} {
		tag := netpolicy.Tag(id)
		if strings.Contains(string(links), "cvm-"+tag) {
			t.Errorf("TAP cvm-%s (%s) left after delete", tag, id)
		}
		if strings.Contains(string(rules), "CELLVM-"+tag) {
			t.Errorf("iptables chains CELLVM-%s (%s) left after delete", tag, id)
		}
	}
}
