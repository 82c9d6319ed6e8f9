package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// probeCell connects from the guest to each host on port 80 and prints
// "host RESULT SECONDS", RESULT OPEN or the exception's name.
const probeCell = `import socket, time
def probe(host, port=80):
    t0 = time.time()
    try:
        s = socket.create_connection((host, port), timeout=15)
        s.close()
        r = 'OPEN'
    except Exception as e:
        r = type(e).__name__
    print(host, r, round(time.time() - t0, 2))
for h in %s:
    probe(h)
`

// probe runs probeCell and returns each host's result and seconds.
func probe(t *testing.T, m sandbox.Manager, id string, hosts ...string) map[string]string {
	t.Helper()
	list := "[" + strings.Join(quoteAll(hosts), ", ") + "]"
	r := runCell(t, m, id, fmt.Sprintf(probeCell, list), 3*time.Minute)
	if r.Status != cell.StatusOK {
		t.Fatalf("probe cell: %+v", r)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			out[f[0]] = f[1] + " " + f[2]
		}
	}
	t.Logf("probes: %v", out)
	return out
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// outcome splits a probe's result into its kind and seconds.
func outcome(res string) (string, float64) {
	f := strings.Fields(res)
	if len(f) != 2 {
		return "missing", 0
	}
	secs, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return "missing", 0
	}
	return f[0], secs
}

// failedFast reports whether a probe failed as want within limit seconds.
func failedFast(res, want string, limit float64) bool {
	kind, secs := outcome(res)
	return kind == want && secs < limit
}

// TestNetworkSideDoorsInMicroVM, through the manager with a VM: a
// catch-all policy still refuses the metadata and wire-server addresses;
// an IPv6 connection fails fast; a flow the policy update revokes is cut.
func TestNetworkSideDoorsInMicroVM(t *testing.T) {
	m := netRigManager(t)
	if m == nil {
		return
	}
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{MemoryMiB: 512, Network: &sandbox.NetworkPolicy{Allow: []string{"0.0.0.0/0"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	// The rig is slow: "fast" is well under the 15 s the probe waits.
	const fastS = 5

	got := probe(t, m, id, append([]string{allowedServer, "2001:db8::1"}, metadataServers...)...)
	if !strings.HasPrefix(got[allowedServer], "OPEN") {
		t.Errorf("0.0.0.0/0: %s is %q, want open (control)", allowedServer, got[allowedServer])
	}
	for _, a := range metadataServers {
		if !failedFast(got[a], "ConnectionRefusedError", fastS) {
			t.Errorf("0.0.0.0/0: %s is %q, want refused at once", a, got[a])
		}
	}
	if kind, secs := outcome(got["2001:db8::1"]); kind == "OPEN" || kind == "TimeoutError" || kind == "missing" || secs >= fastS {
		t.Errorf("IPv6 2001:db8::1 is %q, want a fast failure", got["2001:db8::1"])
	}

	// A long-lived flow, then a policy without its destination.
	open := fmt.Sprintf("import socket\nflow = socket.create_connection((%q, 7), timeout=15)\nflow.sendall(b'ping')\nprint(flow.recv(16))", allowedServer)
	if r := runCell(t, m, id, open, 3*time.Minute); r.Status != cell.StatusOK || strings.TrimSpace(r.Stdout) != "b'ping'" {
		t.Fatalf("open a flow: %+v", r)
	}
	if err := m.SetNetwork(ctx, id, sandbox.NetworkPolicy{Allow: []string{unlistedServer}}); err != nil {
		t.Fatal(err)
	}
	again := "flow.settimeout(15)\ntry:\n    flow.sendall(b'again')\n    r = flow.recv(16)\n    print('ECHO' if r else 'CLOSED', r)\nexcept Exception as e:\n    print('CUT', type(e).__name__)"
	r := runCell(t, m, id, again, 3*time.Minute)
	if r.Status != cell.StatusOK || !strings.HasPrefix(strings.TrimSpace(r.Stdout), "CUT ConnectionResetError") {
		t.Errorf("the revoked flow after the update: %q, want it reset", r.Stdout)
	}
	got = probe(t, m, id, allowedServer, unlistedServer)
	if !failedFast(got[allowedServer], "ConnectionRefusedError", fastS) || !strings.HasPrefix(got[unlistedServer], "OPEN") {
		t.Errorf("after the update: %v; want %s refused and %s open", got, allowedServer, unlistedServer)
	}
	if err := m.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
}
