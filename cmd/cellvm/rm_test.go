package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// rmLine is one line of `rm --json`.
type rmLine struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Removed bool   `json:"removed"`
	Error   *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// rmLines parses the output of an `rm --json`: one JSON object a line.
func rmLines(t *testing.T, r result) []rmLine {
	t.Helper()
	var out []rmLine
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var x rmLine
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("not a JSON line %q: %v (%+v)", l, err, r)
		}
		out = append(out, x)
	}
	return out
}

// TestRemoveJSON: `sandbox rm`, `snapshot rm`, `workspace rm` and
// `image rm` with --json print a JSON object per item on stdout (removed,
// or the error's code), nothing on stderr, and exit 1 when one failed
// after trying every item.
func TestRemoveJSON(t *testing.T) {
	d := startFakeDaemon(t)
	a := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	b := strings.TrimSpace(d.cellvm(t, "sandbox", "create", "--workspace", "notes").stdout)
	snap := strings.TrimSpace(d.cellvm(t, "sandbox", "snapshot", a).stdout)
	if a == "" || b == "" || snap == "" {
		t.Fatalf("setup: sandboxes %q %q, snapshot %q", a, b, snap)
	}
	check := func(args []string, exit int, want []rmLine) {
		t.Helper()
		r := d.cellvm(t, append(args, "--json")...)
		if r.code != exit || r.stderr != "" {
			t.Errorf("cellvm %v --json: exit %d, stderr %q; want exit %d and no stderr", args, r.code, r.stderr, exit)
		}
		got := rmLines(t, r)
		if len(got) != len(want) {
			t.Fatalf("cellvm %v --json: %d lines, want %d:\n%s", args, len(got), len(want), r.stdout)
		}
		for i, w := range want {
			g := got[i]
			code := ""
			if g.Error != nil {
				code = g.Error.Code
				if g.Error.Message == "" {
					t.Errorf("cellvm %v --json: line %d has an error with no message", args, i)
				}
			}
			wantCode := ""
			if w.Error != nil {
				wantCode = w.Error.Code
			}
			if g.ID != w.ID || g.Name != w.Name || g.Removed != w.Removed || code != wantCode {
				t.Errorf("cellvm %v --json: line %d is %+v (error %q), want %+v (error %q)", args, i, g, code, w, wantCode)
			}
		}
	}
	failed := func(code string) *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} {
		return &struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{Code: code}
	}
	// Held by b: refused, and said so as JSON.
	check([]string{"workspace", "rm", "notes"}, exitError, []rmLine{{Name: "notes", Error: failed("busy")}})
	// One missing sandbox among two: both others go, the missing one is named.
	check([]string{"sandbox", "rm", a, "sb-none", b}, exitError, []rmLine{
		{ID: a, Removed: true}, {ID: "sb-none", Error: failed("not_found")}, {ID: b, Removed: true}})
	check([]string{"workspace", "rm", "notes"}, 0, []rmLine{{Name: "notes", Removed: true}})
	check([]string{"workspace", "rm", "notes"}, exitError, []rmLine{{Name: "notes", Error: failed("not_found")}})
	check([]string{"snapshot", "rm", snap}, 0, []rmLine{{ID: snap, Removed: true}})
	check([]string{"image", "rm", "no-such-image"}, exitError, []rmLine{{Name: "no-such-image", Error: failed("not_found")}})
	// Without --json the output is as before: nothing on success, the
	// failure on stderr.
	c := strings.TrimSpace(d.cellvm(t, "sandbox", "create").stdout)
	if r := d.cellvm(t, "sandbox", "rm", c); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("sandbox rm: %+v", r)
	}
	if r := d.cellvm(t, "sandbox", "rm", c); r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "cellvm sandbox rm "+c) {
		t.Errorf("sandbox rm of a removed one: %+v", r)
	}
}
