package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/test/netnstest"
)

// refusedCell prints, for each address, whether a TCP connection to its
// port 80 was refused ("REFUSED": the policy's reset) or failed otherwise
// ("OTHER": what the policy lets through goes to a black hole, the test
// namespace's default route, and times out).
const refusedCell = `import socket
for h in %s:
    try:
        socket.create_connection((h, 80), timeout=8).close()
        r = 'OPEN'
    except ConnectionRefusedError:
        r = 'REFUSED'
    except Exception as e:
        r = 'OTHER-' + type(e).__name__
    print(h, r)
`

// TestDaemonPolicySurvivesKill9: create with one policy, replace it over
// the API, kill -9 the daemon and start another: the sandbox it takes back
// has the replaced policy, in its config and in force in the guest. A
// daemon started without network support in between refuses to start.
func TestDaemonPolicySurvivesKill9(t *testing.T) {
	kvmtest.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for TAPs and iptables")
	}
	if !netnstest.Isolate(t) {
		return
	}
	// Routed somewhere, or the host answers "no route" before its rules.
	for _, args := range [][]string{
		{"link", "add", "cvt-void", "type", "dummy"}, {"link", "set", "cvt-void", "up"}, {"route", "add", "default", "dev", "cvt-void"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	const before, after = "203.0.113.7", "198.51.100.7"
	flags := []string{"--network", "--public-ranges", "198.51.100.0/24,203.0.113.0/24"}
	dir := t.TempDir()
	d := startDaemon(t, dir, flags...)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 384, Network: &sandbox.NetworkPolicy{Allow: []string{before}}})
	if err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	check := func(c *api.Client, when string) {
		t.Helper()
		code := fmt.Sprintf(refusedCell, fmt.Sprintf("[%q, %q]", before, after))
		r := mustCell(t, c, info.ID, code, 3*time.Minute)
		if r.Status != cell.StatusOK || !strings.Contains(r.Stdout, before+" REFUSED") || strings.Contains(r.Stdout, after+" REFUSED") {
			t.Errorf("%s: %q; want %s refused by the policy and %s let through", when, r.Stdout, before, after)
		}
	}
	if err := c.SetNetwork(ctx, info.ID, sandbox.NetworkPolicy{Allow: []string{after}}); err != nil {
		d.stop(t)
		t.Fatal(err)
	}
	check(c, "after the update")

	d.cmd.Process.Kill() // kill -9 of the daemon
	d.cmd.Wait()
	os.Remove(d.socket)

	// Without network support, a daemon refuses this state directory.
	nonet := exec.Command(os.Args[0], "serve", "--socket", d.socket, "--state-dir", d.state, "--network=false", "--templates=false")
	nonet.Env = guestEnv(t)
	var nonetErr bytes.Buffer
	nonet.Stderr = &nonetErr
	if err := nonet.Run(); err == nil || !strings.Contains(nonetErr.String(), info.ID) || !strings.Contains(nonetErr.String(), "--network") {
		t.Errorf("a daemon without network over network state: %v\n%s\nwant a refusal naming %s and --network", err, nonetErr.String(), info.ID)
	}
	os.Remove(d.socket)

	d2 := startDaemon(t, dir, flags...)
	defer d2.stop(t)
	c2 := api.NewClient(d2.socket)
	got, err := c2.Get(ctx, info.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("the restarted daemon did not take the sandbox back: %+v %v\n%s", got, err, d2.log.String())
	}
	if got.Config.Network == nil || !reflect.DeepEqual(got.Config.Network.Allow, []string{after}) {
		t.Errorf("policy after the restart: %+v, want [%s]", got.Config.Network, after)
	}
	check(c2, "after kill -9 and a restart")
	if !strings.Contains(d2.log.String(), "public_ranges=198.51.100.0/24,203.0.113.0/24") {
		t.Errorf("the daemon did not log its public ranges:\n%s", d2.log.String())
	}
}
