package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

func TestToolboxCompanionsAndBadArguments(t *testing.T) {
	ctx := context.Background()
	m := sandboxtest.New()
	info, _ := m.Create(ctx, sandbox.Config{})
	tb := &agent.Toolbox{Manager: m, SandboxID: info.ID, Companions: true}
	call := func(name, args string) agent.ToolResult { return tb.Call(ctx, name, json.RawMessage(args)) }

	if r := call("write_file", `{"path": "/workspace/a.txt", "content": "hello"}`); r.IsError || !strings.Contains(r.Text, "wrote 5 bytes to /workspace/a.txt") {
		t.Errorf("write_file = %+v", r)
	}
	if r := call("read_file", `{"path": "workspace/a.txt"}`); r.IsError || r.Text != "hello" {
		t.Errorf("read_file = %+v", r)
	}
	if r := call("read_file", `{"path": "/workspace/../etc/passwd"}`); !r.IsError || !strings.Contains(r.Text, `".."`) {
		t.Errorf("read_file with .. = %+v", r)
	}
	if r := call("exec", `{"argv": ["echo", "a", "b"]}`); r.IsError || !strings.Contains(r.Text, "exit code: 0") || !strings.Contains(r.Text, "a b") {
		t.Errorf("exec = %+v", r)
	}
	if r := call("exec", `{"argv": ["nope"]}`); !r.IsError || !strings.Contains(r.Text, "exit code: 127") {
		t.Errorf("exec of a missing program = %+v", r)
	}
	for args, want := range map[string]string{
		`{}`:                                `needs "code"`,
		`{"code": 5}`:                       "do not match the tool's schema",
		`{"code": "x", "timeout_s": -1}`:    "out of range",
		`{"code": "x", "timeout_s": 99999}`: "out of range",
	} {
		if r := call("run_python", args); !r.IsError || !strings.Contains(r.Text, want) {
			t.Errorf("run_python %s = %+v; want a tool error with %q", args, r, want)
		}
	}
	if cells := cellsRun(m); len(cells) != 0 {
		t.Errorf("bad calls ran cells: %v", cells)
	}
	gone := &agent.Toolbox{Manager: m, SandboxID: "sb-none"}
	if r := gone.Call(ctx, "run_python", json.RawMessage(`{"code": "1"}`)); !r.IsError || !strings.Contains(r.Text, "not found") {
		t.Errorf("missing sandbox = %+v", r)
	}
	plain := &agent.Toolbox{Manager: m, SandboxID: info.ID}
	if r := plain.Call(ctx, "exec", json.RawMessage(`{"argv": ["echo"]}`)); !r.IsError || !strings.Contains(r.Text, "no tool named") {
		t.Errorf("exec without companions = %+v", r)
	}
}

// The description lists what the image's manifest says is installed: each
// featured module with its version, in the manifest's order, and Python's
// version; and nothing the manifest does not list.
func TestRunPythonDescriptionListsTheImageManifest(t *testing.T) {
	img := manifest.Default()
	for _, facts := range []agent.SandboxFacts{{}, {Network: []string{"pypi.org"}}} {
		d := agent.RunPythonDescription(facts)
		if !strings.Contains(d, "Python "+img.Python+" with") {
			t.Errorf("description does not state Python %s: %s", img.Python, d)
		}
		at := 0
		for _, mod := range img.Modules {
			i := strings.Index(d[at:], mod.Distribution+" "+mod.Version)
			if i < 0 {
				t.Errorf("description lacks %s %s (after offset %d): %s", mod.Distribution, mod.Version, at, d)
				continue
			}
			at += i
		}
		listed := d[strings.Index(d, "installed: ")+len("installed: "):]
		listed = listed[:strings.Index(listed, " (and the standard library")]
		if got, want := strings.Count(listed, ", ")+1, len(img.Modules); got != want {
			t.Errorf("description lists %d packages, the manifest %d: %q", got, want, listed)
		}
	}
	for _, want := range []string{"scikit-learn", "seaborn", "statsmodels", "sympy", "pip"} {
		found := false
		for _, mod := range img.Modules {
			found = found || mod.Distribution == want
		}
		if !found {
			t.Errorf("the image's manifest features no %s: %+v", want, img.Modules)
		}
	}
}

func TestRunPythonDescriptionTellsTheTruth(t *testing.T) {
	d := agent.RunPythonDescription(agent.SandboxFacts{TimeoutS: 60})
	for _, w := range []string{"persists", "no network", "Print what you need", "images", "/workspace", "60 seconds"} {
		if !strings.Contains(d, w) {
			t.Errorf("description lacks %q", w)
		}
	}
	if !strings.Contains(d, "unprivileged user") || strings.Contains(d, "as root") {
		t.Errorf("description of a default sandbox does not say code runs unprivileged: %s", d)
	}
	if !strings.Contains(d, "pip cannot download anything") {
		t.Errorf("description without network does not say pip cannot download: %s", d)
	}
	d = agent.RunPythonDescription(agent.SandboxFacts{Network: []string{"pypi.org"}})
	if strings.Contains(d, "no network") || !strings.Contains(d, "limited to: pypi.org") || !strings.Contains(d, "%pip install") {
		t.Errorf("description with a policy: %s", d)
	}
	d = agent.RunPythonDescription(agent.SandboxFacts{Root: true})
	if !strings.Contains(d, "runs as root") || strings.Contains(d, "unprivileged") {
		t.Errorf("description of a root sandbox: %s", d)
	}
	for _, s := range agent.Specs(agent.SandboxFacts{}, true) {
		var schema map[string]any
		if err := json.Unmarshal(s.Schema, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s schema: %v %v", s.Name, schema, err)
		}
	}
}

// cellsRun returns the RunCell calls m received.
func cellsRun(m *sandboxtest.Manager) []string {
	var out []string
	for _, c := range m.Calls() {
		if strings.HasPrefix(c, "RunCell ") {
			out = append(out, c)
		}
	}
	return out
}
