package main

import (
	"context"
	"encoding/json"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

// TestSandboxLabelsAndFilters: create -l labels a sandbox, ls -l and
// --state filter, -q prints ids, --format a template, and sandbox ttl
// sets the lifetime from now.
func TestSandboxLabelsAndFilters(t *testing.T) {
	d := startFakeDaemon(t)
	create := func(args ...string) string {
		t.Helper()
		r := d.cellvm(t, append([]string{"sandbox", "create"}, args...)...)
		if r.code != 0 {
			t.Fatalf("create %v: %+v", args, r)
		}
		return strings.TrimSpace(r.stdout)
	}
	a := create("-l", "run=42", "--label", "user=alice")
	b := create("-l", "run=42", "-l", "user=bob")
	c := create("-l", "run=7")
	if r := d.cellvm(t, "sandbox", "pause", b); r.code != 0 {
		t.Fatal(r)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-q"}, a + "\n" + b + "\n" + c + "\n"},
		{[]string{"-l", "run=42", "-q"}, a + "\n" + b + "\n"},
		{[]string{"-l", "run=42", "-l", "user=bob", "-q"}, b + "\n"},
		{[]string{"--state", "running", "-q"}, a + "\n" + c + "\n"},
		{[]string{"--state", "paused,lost", "-l", "run=42", "-q"}, b + "\n"},
		{[]string{"-l", "run=none", "-q"}, ""},
		{[]string{"-l", "run=42", "--format", `{{.ID}} {{.State}} {{index .Config.Labels "user"}}`}, a + " running alice\n" + b + " paused bob\n"},
	} {
		r := d.cellvm(t, append([]string{"sandbox", "ls"}, tc.args...)...)
		if r.code != 0 || r.stdout != tc.want {
			t.Errorf("ls %v: %+v, want stdout %q", tc.args, r, tc.want)
		}
	}
	r := d.cellvm(t, "sandbox", "ls", "-l", "run=7")
	if r.code != 0 || !strings.Contains(r.stdout, "LABELS") || !strings.Contains(r.stdout, c) || !strings.Contains(r.stdout, "run=7") || strings.Contains(r.stdout, a) {
		t.Errorf("ls -l run=7's table: %+v", r)
	}
	r = d.cellvm(t, "sandbox", "ls", "-l", "user=alice", "--json")
	var list []sandbox.Info
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Config.Labels["run"] != "42" {
		t.Errorf("ls --json: %+v %v", r, err)
	}

	if r := d.cellvm(t, "sandbox", "ttl", a, "2h"); r.code != 0 || !strings.Contains(r.stdout, "2h0m0s") {
		t.Errorf("sandbox ttl 2h: %+v", r)
	}
	if r := d.cellvm(t, "sandbox", "inspect", a); !strings.Contains(r.stdout, `"ttl_s": 7200`) || !strings.Contains(r.stdout, `"run": "42"`) {
		t.Errorf("inspect after ttl 2h: %s", r.stdout)
	}
	if r := d.cellvm(t, "sandbox", "ttl", "sb-nope", "1h"); r.code != exitError || !strings.Contains(r.stderr, "no sandbox") {
		t.Errorf("ttl of an unknown sandbox: %+v", r)
	}
}

// TestSandboxLabelUsageErrors: malformed labels, states, templates and
// TTLs are usage errors (exit 2) that never reach the daemon.
func TestSandboxLabelUsageErrors(t *testing.T) {
	d := startFakeDaemon(t)
	before := d.requests()
	for _, args := range [][]string{
		{"sandbox", "create", "-l", "novalue"},
		{"sandbox", "create", "-l", "bad key=1"},
		{"sandbox", "create", "-l", "k=a", "-l", "k=b"},
		{"sandbox", "create", "-l", "k=line\nbreak"},
		{"sandbox", "ls", "-l", "novalue"},
		{"sandbox", "ls", "--state", "asleep"},
		{"sandbox", "ls", "--format", "{{.ID"},
		{"sandbox", "ls", "-q", "--format", "{{.ID}}"},
		{"sandbox", "ls", "-q", "--json"},
		{"sandbox", "ttl", "sb-1", "soon"},
		{"sandbox", "ttl", "sb-1", "0s"},
		{"sandbox", "ttl", "sb-1", "1500ms"},
		{"sandbox", "ttl", "sb-1"},
		{"sandbox", "fork", "snap-000000000001", "-l", "x"},
	} {
		if r := d.cellvm(t, args...); r.code != exitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, r.code, r.stderr, exitUsage)
		}
	}
	if n := d.requests(); n != before {
		t.Errorf("usage errors made %d requests to the daemon", n-before)
	}
}

// TestVersionFlagAndRoute: cellvm --version prints what cellvm version
// does, and the daemon's GET /v1/version answers this binary's version.
func TestVersionFlagAndRoute(t *testing.T) {
	flag := cellvmEnv(t, nil, "", "--version")
	cmd := cellvmEnv(t, nil, "", "version")
	if flag.code != 0 || flag.stdout == "" || flag.stdout != cmd.stdout || !strings.HasPrefix(flag.stdout, "cellvm ") {
		t.Errorf("--version %+v, version %+v", flag, cmd)
	}
	d := startFakeDaemon(t)
	c := api.NewClient(d.socket)
	defer c.Close()
	got, err := c.Version(context.Background())
	if err != nil || got != apiVersion() || got.Go == "" {
		t.Errorf("GET /v1/version: %+v %v, want %+v", got, err, apiVersion())
	}
}

// TestVersionReleaseStamp: the Makefile's -X main.buildRelease wins over
// the build info's module version.
func TestVersionReleaseStamp(t *testing.T) {
	old := buildRelease
	defer func() { buildRelease = old }()
	buildRelease = "v9.9.9"
	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/cellvm/cellvm", Version: "(devel)"}}
	if v := versionOf(info); v.Version != "v9.9.9" {
		t.Errorf("with a release stamp: %+v", v)
	}
	if v := versionOf(nil); v.Version != "v9.9.9" {
		t.Errorf("with a release stamp and no build info: %+v", v)
	}
}
