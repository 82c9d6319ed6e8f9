package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/engine"
)

// wireLifetimes are a sandbox's ttl_s and idle_timeout_s as its JSON
// says them (nil: absent).
type wireLifetimes struct {
	ID     string `json:"id"`
	Config struct {
		TTLS  *int64 `json:"ttl_s"`
		IdleS *int64 `json:"idle_timeout_s"`
	} `json:"config"`
}

func (w wireLifetimes) String() string {
	show := func(p *int64) string {
		if p == nil {
			return "absent"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("ttl_s %s, idle_timeout_s %s", show(w.Config.TTLS), show(w.Config.IdleS))
}

func (w wireLifetimes) is(ttl, idle int64) bool {
	return w.Config.TTLS != nil && *w.Config.TTLS == ttl && w.Config.IdleS != nil && *w.Config.IdleS == idle
}

// TestAPICreateGetsTheDefaultLifetimes: through the TLS listener with a
// token, a create without ttl_s and idle_timeout_s gets serve's defaults
// (ttl_s 3600, idle_timeout_s 900), one with 0 gets none, one with its
// own keeps them; an MCP session's sandbox gets the default TTL too.
func TestAPICreateGetsTheDefaultLifetimes(t *testing.T) {
	d := startRemoteDaemon(t)
	c := d.httpClient(t, remoteToken)
	for _, tc := range []struct {
		body      string
		ttl, idle int64
	}{
		{`{}`, 3600, 900},
		{`{"memory_mib": 256}`, 3600, 900},
		{`{"ttl_s": 0, "idle_timeout_s": 0}`, 0, 0},
		{`{"ttl_s": 60}`, 60, 900},
		{`{"idle_timeout_s": 0}`, 3600, 0},
	} {
		resp, err := c.Post(d.url+"/v1/sandboxes", "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got wireLifetimes
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("create %s: %d %s", tc.body, resp.StatusCode, b)
		}
		if !got.is(tc.ttl, tc.idle) {
			t.Errorf("create %s: %s, want ttl_s %d and idle_timeout_s %d", tc.body, got, tc.ttl, tc.idle)
		}
	}

	// MCP's session sandbox: the default TTL, and the session's idle
	// timeout (--mcp-idle-timeout 10m, plus a minute).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "cellvm-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + api.MCPPath, HTTPClient: c}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: agent.ToolRunPython, Arguments: map[string]any{"code": "x = 1"}}); err != nil || r.IsError {
		t.Fatalf("run_python over MCP: %v %+v", err, r)
	}
	resp, err := c.Get(d.url + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Sandboxes []wireLifetimes }
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Sandboxes) != 6 {
		t.Fatalf("list: %+v, %v; want the 5 creates and the MCP session's", list, err)
	}
	if mcpBox := list.Sandboxes[5]; !mcpBox.is(3600, 660) {
		t.Errorf("the MCP session's sandbox %s: %s, want ttl_s 3600 and idle_timeout_s 660", mcpBox.ID, mcpBox)
	}
}

// TestCLICreateLeavesLifetimesToTheDaemon: `cellvm sandbox create` and
// `sandbox fork` without --ttl and --idle-timeout get the daemon's
// defaults, whatever they are; 0 asks for none.
func TestCLICreateLeavesLifetimesToTheDaemon(t *testing.T) {
	d := startFakeDaemon(t, "--default-ttl", "45m", "--default-idle-timeout", "5m")
	create := func(args ...string) sandbox.Info {
		t.Helper()
		r := d.cellvm(t, append(args, "--json")...)
		var info sandbox.Info
		if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != 0 {
			t.Fatalf("%v: %+v %v", args, r, err)
		}
		return info
	}
	if info := create("sandbox", "create"); info.Config.TTL != 45*time.Minute || info.Config.IdleTimeout != 5*time.Minute {
		t.Errorf("sandbox create: TTL %v, IdleTimeout %v; want the daemon's 45m and 5m", info.Config.TTL, info.Config.IdleTimeout)
	}
	info := create("sandbox", "create", "--ttl", "0", "--idle-timeout", "90s")
	if info.Config.TTL != sandbox.Never || info.Config.IdleTimeout != 90*time.Second {
		t.Errorf("sandbox create --ttl 0 --idle-timeout 90s: TTL %v, IdleTimeout %v", info.Config.TTL, info.Config.IdleTimeout)
	}
	r := d.cellvm(t, "sandbox", "snapshot", info.ID)
	if r.code != 0 {
		t.Fatalf("snapshot: %+v", r)
	}
	fork := create("sandbox", "fork", strings.TrimSpace(r.stdout))
	if fork.Config.TTL != 45*time.Minute || fork.Config.IdleTimeout != 5*time.Minute {
		t.Errorf("sandbox fork: TTL %v, IdleTimeout %v; want the daemon's 45m and 5m, not its parent's", fork.Config.TTL, fork.Config.IdleTimeout)
	}
}

// TestMaxTTLRefusesNeverAndMore: under --max-ttl, a create asking for no
// TTL or for more than the cap is refused (400, naming the cap) and makes
// nothing; one at the cap is made.
func TestMaxTTLRefusesNeverAndMore(t *testing.T) {
	d := startFakeDaemon(t, "--max-ttl", "2h", "--default-ttl", "30m")
	for _, ttl := range []string{"0", "2h0m1s", "720h"} {
		r := d.cellvm(t, "sandbox", "create", "--ttl", ttl, "--json")
		if r.code != exitError || !strings.Contains(r.stdout, `"code":"invalid"`) || !strings.Contains(r.stdout, "7200 s (serve --max-ttl)") {
			t.Errorf("create --ttl %s under a 2h cap: %+v", ttl, r)
		}
	}
	if r := d.cellvm(t, "sandbox", "ls", "--json"); strings.Contains(r.stdout, "sb-") {
		t.Errorf("a refused create made a sandbox: %s", r.stdout)
	}
	r := d.cellvm(t, "sandbox", "create", "--json", "--ttl", "2h", "--idle-timeout", "0")
	var info sandbox.Info
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Config.TTL != 2*time.Hour || info.Config.IdleTimeout != sandbox.Never {
		t.Errorf("create at the cap with no idle timeout: %+v %v", r, err)
	}
	r = d.cellvm(t, "sandbox", "create", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Config.TTL != 30*time.Minute {
		t.Errorf("create under the cap with the default: %+v %v", r, err)
	}
}

// TestServeRefusesLifetimesPastItsCap: flags that would refuse every
// create, or that the contract cannot hold, stop serve before it starts.
func TestServeRefusesLifetimesPastItsCap(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-ttl", "1h", "--default-ttl", "2h"}, "--default-ttl 2h0m0s is above --max-ttl 1h0m0s"},
		{[]string{"--max-ttl", "1h", "--default-ttl", "0"}, "--default-ttl 0 (none) with --max-ttl"},
		{[]string{"--default-idle-timeout", "-1m"}, "negative"},
		{[]string{"--max-ttl", "8760h"}, "above the most a sandbox may live"},
		{[]string{"--snapshot-max-mib", "-1"}, "--snapshot-max-mib -1"},
		{[]string{"--snapshot-max-mib", "lots"}, "want a whole number of MiB"},
	} {
		args := append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "s.sock"), "--state-dir", t.TempDir()}, c.args...)
		r := cellvmEnv(t, nil, "", args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("serve %v: exit %d, stderr %q; want 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// TestServeWarnsOfAStateDirInRAM: a state directory on tmpfs is warned
// about at start; one on a disk is not.
func TestServeWarnsOfAStateDirInRAM(t *testing.T) {
	const warning = "the state directory is on tmpfs"
	if sfs, err := engine.StatStateFS(os.TempDir()); err == nil && !sfs.InRAM {
		if d := startFakeDaemon(t); strings.Contains(d.log.String(), warning) {
			t.Errorf("a state directory on a disk (%s) was warned about:\n%s", os.TempDir(), d.log.String())
		}
	}
	if sfs, err := engine.StatStateFS("/dev/shm"); err != nil || !sfs.InRAM {
		t.Skip("no tmpfs at /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "cvstate")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := startFakeDaemon(t, "--state-dir", filepath.Join(dir, "state"))
	if log := d.log.String(); !strings.Contains(log, warning) || !strings.Contains(log, "snapshots, templates, workspaces") {
		t.Errorf("a state directory on /dev/shm was not warned about:\n%s", log)
	}
}

// TestSnapshotCapDefault: without --snapshot-max-mib the cap is half of
// the state file system's free space (with the images there), said in
// the log; given, it is what was given, 0 being none.
func TestSnapshotCapDefault(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state") // not made yet
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := &serveLifetimes{}
	got, err := l.imageCap(state, log)
	if err != nil {
		t.Fatal(err)
	}
	sfs, err := engine.StatStateFS(state)
	if err != nil {
		t.Fatal(err)
	}
	// The free space moves as other processes write: allow 64 MiB.
	if want := sfs.FreeBytes / 2; got < want-32<<20 || got > want+32<<20 || got <= 0 {
		t.Errorf("default cap %d bytes, want about half of %d free", got, sfs.FreeBytes)
	}
	if want := fmt.Sprintf("snapshot disk cap %d MiB: half of the free space on %s", got>>20, filepath.Dir(state)); !strings.Contains(buf.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, buf.String())
	}
	for _, c := range []struct {
		flag string
		want int64
		log  string
	}{{"100", 100 << 20, "snapshot disk cap 100 MiB (--snapshot-max-mib)"}, {"0", 0, "no snapshot disk cap"}} {
		l := &serveLifetimes{}
		if err := l.snapshotMiB.Set(c.flag); err != nil {
			t.Fatal(err)
		}
		buf.Reset()
		if got, err := l.imageCap(state, log); err != nil || got != c.want || !strings.Contains(buf.String(), c.log) {
			t.Errorf("--snapshot-max-mib %s: %d, %v, log %q; want %d and %q", c.flag, got, err, buf.String(), c.want, c.log)
		}
	}
}

// TestStateDir: --state-dir, else $CELLVM_STATE_DIR, else /var/lib/cellvm
// (no longer beside the socket, on /run's tmpfs).
func TestStateDir(t *testing.T) {
	t.Setenv("CELLVM_STATE_DIR", "")
	if got := StateDir(""); got != "/var/lib/cellvm" {
		t.Errorf("default state directory %q", got)
	}
	t.Setenv("CELLVM_STATE_DIR", "/srv/cellvm")
	if got := StateDir(""); got != "/srv/cellvm" {
		t.Errorf("with $CELLVM_STATE_DIR: %q", got)
	}
	if got := StateDir("/data/cv"); got != "/data/cv" {
		t.Errorf("with --state-dir: %q", got)
	}
}
