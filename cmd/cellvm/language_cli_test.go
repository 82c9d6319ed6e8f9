package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// TestCellLanguageAndContext: --language and --context reach the manager
// with `run` (no daemon) and `cell` (the daemon's API), and sandbox restart
// restarts the session they name; a bad one is a usage error (exit 2)
// that never reaches the daemon.
func TestCellLanguageAndContext(t *testing.T) {
	// run, without a daemon: the embedded (fake) manager.
	if r := cellvmEnv(t, []string{"CELLVM_TEST_FAKE_MANAGER=1"}, "", "run", "--language", "js", "-c", cellSession); r.code != 0 || r.stdout != "language=javascript context=default\n" {
		t.Errorf("run --language js: %+v", r)
	}
	if r := cellvmEnv(t, []string{"CELLVM_TEST_FAKE_MANAGER=1"}, "", "run", "-c", cellSession); r.code != 0 || r.stdout != "language=python context=default\n" {
		t.Errorf("run without --language (Python's default session, the zero Session): %+v", r)
	}

	d := startFakeDaemon(t)
	r := d.cellvm(t, "sandbox", "create")
	if r.code != 0 {
		t.Fatalf("sandbox create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--language", "ts"}, "language=typescript context=default\n"},
		{[]string{"--language", "Bash", "--context", "build-1"}, "language=bash context=build-1\n"},
		{[]string{"--context", "c2"}, "language=python context=c2\n"},
	} {
		r := d.cellvm(t, append([]string{"cell", id, "-c", cellSession}, c.args...)...)
		if r.code != 0 || r.stdout != c.want {
			t.Errorf("cell %v: %+v; want stdout %q", c.args, r, c.want)
		}
	}
	if r := d.cellvm(t, "sandbox", "restart", id, "--language", "sh", "--context", "build-1"); r.code != 0 {
		t.Errorf("sandbox restart --language sh: %+v", r)
	}
	if r := d.cellvm(t, "sandbox", "restart", id); r.code != 0 {
		t.Errorf("sandbox restart: %+v", r)
	}
	if r := d.cellvm(t, "cell", id, "-c", cellSession); !strings.Contains(r.stdout, "restart=bash/build-1\nrestart=python/default\n") {
		t.Errorf("the restarts' sessions: %+v", r)
	}

	// Named sessions: create, list, remove.
	if r := d.cellvm(t, "context", "create", id, "--language", "js", "--cwd", "/tmp", "c9"); r.code != 0 || r.stdout != "c9\n" {
		t.Errorf("context create: %+v", r)
	}
	if r := d.cellvm(t, "context", "ls", id); r.code != 0 || !regexp.MustCompile(`(?m)^javascript +c9 +/tmp +false$`).MatchString(r.stdout) {
		t.Errorf("context ls: %+v", r)
	}
	var list []sandbox.ContextInfo
	if r := d.cellvm(t, "context", "ls", id, "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil ||
		!slices.ContainsFunc(list, func(c sandbox.ContextInfo) bool { return c.Name == "c9" && c.Language == cell.JavaScript }) {
		t.Errorf("context ls --json: %+v", r)
	}
	if r := d.cellvm(t, "context", "rm", id, "--language", "js", "c9"); r.code != 0 {
		t.Errorf("context rm: %+v", r)
	}
	if r := d.cellvm(t, "context", "rm", id, "--language", "js", "c9"); r.code != exitError || !strings.Contains(r.stderr, "c9") {
		t.Errorf("context rm of a context gone: %+v", r)
	}

	before := d.requests()
	for _, args := range [][]string{
		{"cell", id, "-c", "1", "--language", "cobol"},
		{"cell", id, "-c", "1", "--context", "../x"},
		{"run", "-c", "1", "--language", "cobol"},
		{"sandbox", "restart", id, "--language", "cobol"},
		{"sandbox", "restart", id, "--context", "-x"},
		{"context", "create", id, "--language", "cobol"},
		{"context", "create", id, "a b"},
		{"context", "create", id, "c", "--cwd", "relative"},
		{"context", "create"},
		{"context", "create", id, "a", "b"},
		{"context", "rm", id},
		{"context", "rm", id, "ok", "../bad"},
		{"context", "ls"},
		{"context"},
	} {
		r := d.cellvm(t, args...)
		if r.code != exitUsage {
			t.Errorf("cellvm %v: exit %d, stderr %q; want %d", args, r.code, r.stderr, exitUsage)
		}
		if strings.Contains(strings.Join(args, " "), "cobol") && !strings.Contains(r.stderr, "javascript (js)") {
			t.Errorf("cellvm %v: the error does not name the languages: %q", args, r.stderr)
		}
	}
	if n := d.requests(); n != before {
		t.Errorf("bad command lines reached the daemon: %d requests", n-before)
	}
}
