package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// sessionRecorder is the double, noting each cell's session.
type sessionRecorder struct {
	*sandboxtest.Manager
	mu       sync.Mutex
	sessions []sandbox.Session
}

func (m *sessionRecorder) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	m.mu.Lock()
	m.sessions = append(m.sessions, c.Session)
	m.mu.Unlock()
	return m.Manager.RunCell(ctx, id, sandbox.Cell{Code: c.Code, Timeout: c.Timeout}, onEvent)
}

var fullLanguages = []cell.LanguageInfo{
	{Name: cell.Python, Version: "3.11.2"}, {Name: cell.Bash, Version: "5.2.15"},
	{Name: cell.JavaScript, Version: "18.19.0"}, {Name: cell.TypeScript, Version: "5.9.3"},
}

func specNamed(specs []agent.ToolSpec, name string) (agent.ToolSpec, bool) {
	for _, s := range specs {
		if s.Name == name {
			return s, true
		}
	}
	return agent.ToolSpec{}, false
}

// TestRunCodeSpec: run_code is offered with the companions for the
// languages the image has besides Python, named with their versions, and
// not at all for an image with Python alone.
func TestRunCodeSpec(t *testing.T) {
	specs := agent.Specs(agent.SandboxFacts{Languages: fullLanguages}, true)
	rc, ok := specNamed(specs, agent.ToolRunCode)
	if !ok || specs[0].Name != agent.ToolRunPython || specs[1].Name != agent.ToolRunCode {
		t.Fatalf("specs %v: want run_python then run_code", specs)
	}
	for _, w := range []string{"JavaScript (Node.js) 18.19.0", "TypeScript 5.9.3", "Bash 5.2.15", "own persistent session", "top-level await", "exit status"} {
		if !strings.Contains(rc.Description, w) {
			t.Errorf("run_code's description lacks %q: %s", w, rc.Description)
		}
	}
	var schema struct {
		Properties struct {
			Language struct {
				Enum []string `json:"enum"`
			} `json:"language"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(rc.Schema, &schema); err != nil || !slices.Equal(schema.Properties.Language.Enum, []string{"javascript", "typescript", "bash"}) ||
		!slices.Equal(schema.Required, []string{"language", "code"}) {
		t.Errorf("run_code's schema %s: %+v %v", rc.Schema, schema, err)
	}
	if _, ok := specNamed(agent.Specs(agent.SandboxFacts{Languages: fullLanguages[:1]}, true), agent.ToolRunCode); ok {
		t.Error("run_code offered for an image with Python alone")
	}
	if _, ok := specNamed(agent.Specs(agent.SandboxFacts{Languages: fullLanguages}, false), agent.ToolRunCode); ok {
		t.Error("run_code offered without the companions")
	}
	bashOnly := agent.Specs(agent.SandboxFacts{Languages: []cell.LanguageInfo{{Name: cell.Python}, {Name: cell.Bash}}}, true)
	if rc, ok := specNamed(bashOnly, agent.ToolRunCode); !ok || strings.Contains(rc.Description, "JavaScript") || !strings.Contains(rc.Description, ": Bash.") {
		t.Errorf("run_code for an image with Bash alone: %+v", rc)
	}
}

// TestRunCodeCall: run_code runs its cell in its language's session; a
// language the image lacks, Python, or bad arguments are tool errors that
// run nothing; approval is asked with the tool's name.
func TestRunCodeCall(t *testing.T) {
	ctx := context.Background()
	m := &sessionRecorder{Manager: sandboxtest.New()}
	info, _ := m.Create(ctx, sandbox.Config{})
	var asked []string
	tb := &agent.Toolbox{Manager: m, SandboxID: info.ID, Companions: true,
		Languages: []cell.LanguageInfo{{Name: cell.Python}, {Name: cell.JavaScript}, {Name: cell.TypeScript}},
		Approve: func(_ context.Context, tool, code string) (string, bool, error) {
			asked = append(asked, tool)
			return code, true, nil
		}}
	call := func(args string) agent.ToolResult { return tb.Call(ctx, agent.ToolRunCode, json.RawMessage(args)) }
	if r := call(`{"language": "javascript", "code": "x = 1"}`); r.IsError {
		t.Errorf("run_code js: %+v", r)
	}
	if r := call(`{"language": "ts", "code": "x = 3"}`); r.IsError {
		t.Errorf("run_code ts: %+v", r)
	}
	if want := []sandbox.Session{{Language: cell.JavaScript}, {Language: cell.TypeScript}}; !slices.Equal(m.sessions, want) {
		t.Errorf("sessions %v, want %v", m.sessions, want)
	}
	if !slices.Equal(asked, []string{agent.ToolRunCode, agent.ToolRunCode}) {
		t.Errorf("approve asked with %v", asked)
	}
	for args, want := range map[string]string{
		`{}`:                                               `needs "language" (one of javascript, typescript)`,
		`{"language": "bash", "code": "ls"}`:               "not one this sandbox runs",
		`{"language": "cobol", "code": "x"}`:               "not one this sandbox runs",
		`{"language": "python", "code": "x"}`:              "use run_python",
		`{"language": "js", "code": 5}`:                    "do not match the tool's schema",
		`{"language": "js", "code": "x", "timeout_s": -1}`: "out of range",
	} {
		if r := call(args); !r.IsError || !strings.Contains(r.Text, want) {
			t.Errorf("run_code %s = %+v, want an error saying %q", args, r, want)
		}
	}
	if len(m.sessions) != 2 {
		t.Errorf("refused calls ran cells: %v", m.sessions)
	}
}
