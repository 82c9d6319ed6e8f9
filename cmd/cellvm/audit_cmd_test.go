package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/audit"
)

func TestAuditCommandReadsAndFilters(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	l, err := audit.Open(path, audit.Options{MaxBytes: 4096, Keep: 10})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-3 * time.Hour)
	for i := 0; i < 60; i++ {
		r := audit.Record{Action: "POST /v1/sandboxes/{id}/cells", Tenant: []string{"alpha", "beta"}[i%2],
			Sandbox: fmt.Sprintf("sb-%d", i%3), Status: 200, ResultStatus: "ok", Peer: "192.0.2.1"}
		if i < 10 {
			r.Time = old
		}
		r.SetCode(fmt.Sprintf("x = %d", i))
		if err := l.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	l.Write(audit.Record{Action: "GET /v1/sandboxes/{id}", Tenant: "beta", Sandbox: "sb-\x1b[31mred", Status: 404, Error: "not_found", Reason: "no sandbox\x1b]0;title\x07"})
	l.Close()
	if len(audit.Files(path)) < 3 {
		t.Fatalf("the log did not rotate: %v", audit.Files(path))
	}
	count := func(r result) int {
		n := 0
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if line == "" || strings.HasPrefix(line, `{"error":`) {
				continue
			}
			var rec audit.Record
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("not a JSON line: %q", line)
			}
			n++
		}
		return n
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{nil, 61},
		{[]string{"--tenant", "alpha"}, 30},
		{[]string{"--sandbox", "sb-1"}, 20},
		{[]string{"--tenant", "beta", "--sandbox", "sb-1"}, 10},
		{[]string{"--since", "1h"}, 51},
		{[]string{"--since", old.Add(-time.Minute).UTC().Format(time.RFC3339)}, 61},
	} {
		r := cellvmEnv(t, nil, "", append([]string{"audit", "--file", path, "--json"}, c.args...)...)
		if r.code != 0 || count(r) != c.want {
			t.Errorf("audit %v: exit %d, %d records, want %d\n%s", c.args, r.code, count(r), c.want, r.stderr)
		}
	}
	// In order, across the rotated files.
	r := cellvmEnv(t, nil, "", "audit", "--file", path, "--json", "--tenant", "alpha")
	var prev string
	for i, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec audit.Record
		json.Unmarshal([]byte(line), &rec)
		if rec.Sandbox != fmt.Sprintf("sb-%d", (2*i)%3) || rec.CodeSHA256 == prev {
			t.Fatalf("record %d out of order: %s", i, line)
		}
		prev = rec.CodeSHA256
	}
	// For a person: one line each, control characters defused.
	r = cellvmEnv(t, nil, "", "audit", "--file", path, "--sandbox", "sb-2")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 20 || !strings.Contains(lines[0], "alpha 192.0.2.1 POST /v1/sandboxes/{id}/cells sandbox=sb-2 code=") ||
		!strings.Contains(lines[0], "-> 200 ok") {
		t.Errorf("table: %+v", r)
	}
	r = cellvmEnv(t, nil, "", "audit", "--file", path, "--tenant", "beta", "--since", "1m")
	if strings.ContainsAny(r.stdout, "\x1b\x07") || !strings.Contains(r.stdout, "sandbox=sb-?[31mred") || !strings.Contains(r.stdout, "not_found: no sandbox") {
		t.Errorf("a hostile field reached the terminal: %q", r.stdout)
	}

	// A torn last line is skipped quietly; a bad line elsewhere is
	// reported, after the rest, with exit 1.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"time":"2026-`)
	f.Close()
	if r := cellvmEnv(t, nil, "", "audit", "--file", path, "--json"); r.code != 0 || count(r) != 61 || r.stderr != "" {
		t.Errorf("with a torn last line: %+v", r)
	}
	f, _ = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("\n" + `{"time":"2026-01-01T00:00:00Z","action":"x","tenant":"alpha"}` + "\n")
	f.Close()
	if r := cellvmEnv(t, nil, "", "audit", "--file", path, "--json"); r.code != exitError || count(r) != 62 || !strings.Contains(r.stdout, "not JSON") {
		t.Errorf("with a bad line: %+v", r)
	}

	// Bad arguments and a missing log.
	if r := cellvmEnv(t, nil, "", "audit", "--file", path, "--since", "yesterday"); r.code != exitUsage {
		t.Errorf("--since yesterday: %+v", r)
	}
	if r := cellvmEnv(t, nil, "", "audit", "extra"); r.code != exitUsage {
		t.Errorf("an argument: %+v", r)
	}
	if r := cellvmEnv(t, nil, "", "audit", "--state-dir", filepath.Join(dir, "none")); r.code != exitError || !strings.Contains(r.stderr, filepath.Join(dir, "none", "audit.jsonl")) {
		t.Errorf("no log: %+v", r)
	}
}

// TestServeWritesTheAuditLog runs the daemon with its default audit log
// and reads it with `cellvm audit`, once and following.
func TestServeWritesTheAuditLog(t *testing.T) {
	d := startFakeDaemon(t, "--audit-keep", "2")
	state := filepath.Join(d.dir, "state")
	id := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	d.cellvm(t, "sandbox", "ls")
	d.cellvm(t, "sandbox", "inspect", "sb-nope")

	follow := exec.Command(os.Args[0], "audit", "-f", "--json", "--state-dir", state, "--sandbox", id)
	follow.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1")
	out, _ := follow.StdoutPipe()
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	lines := bufio.NewReader(out)
	next := func() audit.Record {
		t.Helper()
		l, err := lines.ReadString('\n')
		var rec audit.Record
		if err != nil || json.Unmarshal([]byte(l), &rec) != nil {
			t.Fatalf("audit -f: %q %v", l, err)
		}
		return rec
	}
	// The create's record names the sandbox it made, the delete's
	// names its, and the sandbox's end has its own record, written as
	// the manager publishes it (before or after the DELETE's).
	d.cellvm(t, "sandbox", "rm", id)
	got := map[string]audit.Record{}
	for got["DELETE /v1/sandboxes/{id}"].Action == "" || got[audit.ActionSandboxEnd].Action == "" {
		rec := next()
		got[rec.Action] = rec
	}
	if rec := got["POST /v1/sandboxes"]; rec.Sandbox != id || rec.Status != 201 {
		t.Errorf("followed the create %+v", rec)
	}
	if rec := got["DELETE /v1/sandboxes/{id}"]; rec.Sandbox != id || !strings.HasPrefix(rec.Peer, "uid:") || !rec.Operator || rec.Status != 204 {
		t.Errorf("followed the delete %+v", rec)
	}
	if rec := got[audit.ActionSandboxEnd]; rec.Sandbox != id || rec.Reason != "deleted: request" {
		t.Errorf("followed the end %+v", rec)
	}

	r := d.cellvm(t, "audit", "--json", "--state-dir", state)
	var actions []string
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec audit.Record
		json.Unmarshal([]byte(l), &rec)
		actions = append(actions, fmt.Sprintf("%s %d", rec.Action, rec.Status))
	}
	slices.Sort(actions)
	want := "DELETE /v1/sandboxes/{id} 204,GET /v1/sandboxes/{id} 404,POST /v1/sandboxes 201,sandbox.end 0"
	if r.code != 0 || strings.Join(actions, ",") != want {
		t.Errorf("audit: %v, want %s (%+v)", actions, want, r)
	}
	fi, err := os.Stat(filepath.Join(state, "audit.jsonl"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the log's mode: %v %v", fi, err)
	}
}

func TestServeAuditFlags(t *testing.T) {
	d := startFakeDaemon(t, "--audit-log", "off")
	d.cellvm(t, "sandbox", "create")
	if _, err := os.Stat(filepath.Join(d.dir, "state", "audit.jsonl")); err == nil {
		t.Error("--audit-log off wrote a log")
	}
	if !strings.Contains(d.log.String(), "audit log off") {
		t.Error("the daemon does not say its audit log is off")
	}
	for _, bad := range [][]string{
		{"--audit-code", "all"},
		{"--audit-keep", "0"},
		{"--audit-max-mib", "0"},
		{"--trusted-proxy", "10.0.0.0/8"}, // without --listen
		{"--trusted-proxy", "not-a-cidr", "--listen", "tcp://127.0.0.1:0", "--token-file", "/dev/null"},
	} {
		if r := cellvmEnv(t, nil, "", append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "s.sock")}, bad...)...); r.code != exitUsage {
			t.Errorf("serve %v: exit %d, want %d (%s)", bad, r.code, exitUsage, r.stderr)
		}
	}
}
