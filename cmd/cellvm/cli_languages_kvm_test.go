package main

import (
	"strings"
	"testing"

	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestCLILanguages: the command line's --language and --context, `cellvm
// context` and a restart of one session, on one sandbox of a real daemon
// and guest: JavaScript keeps x across cells, Bash its directory and
// exports, a TypeScript context runs typed code, Python's x is not
// JavaScript's, and restarting JavaScript leaves Python's variables.
func TestCLILanguages(t *testing.T) {
	kvmtest.Require(t)
	d := startDaemon(t, t.TempDir())
	defer d.stop(t)
	env := []string{"CELLVM_SOCKET=" + d.socket}
	cv := func(args ...string) result { t.Helper(); return cellvmEnv(t, env, "", args...) }
	r := cv("sandbox", "create")
	if r.code != 0 {
		t.Fatalf("sandbox create: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	defer cv("sandbox", "rm", id)

	for _, c := range []struct {
		args []string
		exit int
		out  string
	}{
		{[]string{"-c", "x = 'py'"}, exitOK, ""},
		{[]string{"--language", "js", "-c", "let x = 41"}, exitOK, ""},
		{[]string{"--language", "js", "-c", "x + 1"}, exitOK, "42"},
		{[]string{"--language", "js", "-c", "console.log('out'); console.error('err')"}, exitOK, "out\n"},
		{[]string{"--language", "bash", "-c", "cd /tmp && export V=7"}, exitOK, ""},
		{[]string{"--language", "bash", "-c", "echo $V; pwd"}, exitOK, "7\n/tmp\n"},
		{[]string{"--language", "bash", "-c", "false"}, exitError, ""},
		{[]string{"-c", "x"}, exitOK, "'py'"},
	} {
		r := cv(append([]string{"cell", id}, c.args...)...)
		if r.code != c.exit || !strings.Contains(r.stdout, c.out) {
			t.Errorf("cell %q: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, r.code, r.stdout, r.stderr, c.exit, c.out)
		}
	}
	if r := cv("context", "create", id, "--language", "ts", "--cwd", "/tmp", "typed"); r.code != 0 || strings.TrimSpace(r.stdout) != "typed" {
		t.Fatalf("context create: %+v", r)
	}
	if r := cv("cell", id, "--language", "ts", "--context", "typed", "-c", "function f(n: number): number { return n * 2 }\nf(21)"); r.code != 0 || !strings.Contains(r.stdout, "42") {
		t.Errorf("a typed function in the context: %+v", r)
	}
	if r := cv("context", "ls", id); r.code != 0 || !strings.Contains(r.stdout, "typed") || !strings.Contains(r.stdout, "/tmp") {
		t.Errorf("context ls: %+v", r)
	}
	if r := cv("sandbox", "restart", id, "--language", "js"); r.code != 0 {
		t.Errorf("restart js: %+v", r)
	}
	if r := cv("cell", id, "--language", "js", "-c", "typeof x"); !strings.Contains(r.stdout, "undefined") {
		t.Errorf("x after JavaScript's restart: %+v", r)
	}
	if r := cv("cell", id, "-c", "x"); !strings.Contains(r.stdout, "'py'") {
		t.Errorf("Python's x after JavaScript's restart: %+v", r)
	}
	if r := cv("context", "rm", id, "--language", "ts", "typed"); r.code != 0 {
		t.Errorf("context rm: %+v", r)
	}
	if r := cv("cell", id, "--language", "cobol", "-c", "1"); r.code != exitUsage {
		t.Errorf("cobol: %+v", r)
	}
}
