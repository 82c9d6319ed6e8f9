package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/audit"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/cellpolicy"
)

// The daemon with --cell-policy asks the hook about each cell and exec over
// the API: code with os.system is refused as a PolicyRefused result, and
// the next cell runs.
func TestServeCellPolicy(t *testing.T) {
	hook := filepath.Join(t.TempDir(), "policy")
	os.WriteFile(hook, []byte("#!/bin/sh\ncase \"$(cat)\" in *os.system*) echo 'no os.system, please' >&2; exit 1;; esac\n"), 0o755)
	d := startFakeDaemon(t, "--cell-policy", hook, "--cell-policy-timeout", "2s")
	if !strings.Contains(d.log.String(), "cell policy hook") {
		t.Errorf("the daemon's log does not say the hook is on:\n%s", d.log.String())
	}
	c := api.NewClient(d.socket)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := c.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.RunCell(ctx, info.ID, sandbox.Cell{Code: "import os\nos.system('ls')", Timeout: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !cellpolicy.IsRefusedCell(res) || res.Error.Value != "no os.system, please" {
		t.Errorf("refused cell over the API: %+v %+v", res, res.Error)
	}
	res, err = c.RunCell(ctx, info.ID, sandbox.Cell{Code: "x = 2\nx", Timeout: time.Minute}, nil)
	if err != nil || res.Status != "ok" || res.ExecutionCount != 1 {
		t.Errorf("allowed cell after a refusal: %+v, %v (want execution count 1: the refused cell never ran)", res, err)
	}
	er, err := c.Exec(ctx, info.ID, sandbox.ExecRequest{Argv: []string{"python3", "-c", "import os; os.system('id')"}, Timeout: time.Minute})
	if err != nil || !cellpolicy.IsRefusedExec(er) {
		t.Errorf("refused exec over the API: %+v, %v", er, err)
	}
	// Each refusal has an audit record of the daemon's own, beside the
	// request's.
	raw, err := os.ReadFile(filepath.Join(d.dir, "state", "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		if rec.Action == audit.ActionPolicyRefused {
			if rec.Sandbox != info.ID || rec.Reason != "no os.system, please" {
				t.Errorf("the refusal's record: %+v", rec)
			}
			kinds = append(kinds, rec.ResultStatus)
		}
	}
	if strings.Join(kinds, ",") != "cell,exec" {
		t.Errorf("policy refusal records for %v, want cell,exec:\n%s", kinds, raw)
	}
}

func TestServeBadCellPolicyFlags(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "hook")
	os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644)
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--cell-policy", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"serve", "--cell-policy", notExec}, "not executable"},
		{[]string{"serve", "--cell-policy", "hook.sh"}, "absolute path"},
		{[]string{"serve", "--cell-policy-timeout", "0s"}, "--cell-policy-timeout"},
	} {
		var out, errb strings.Builder
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and %q", c.args, code, errb.String(), c.msg)
		}
	}
}
