package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// answers is an Approve that answers from a list and records what it was
// asked.
type answers struct {
	asked []string
	next  []func(code string) (string, bool, error)
}

func (a *answers) approve(_ context.Context, tool, code string) (string, bool, error) {
	a.asked = append(a.asked, tool+": "+code)
	f := a.next[0]
	a.next = a.next[1:]
	return f(code)
}

var (
	yes    = func(code string) (string, bool, error) { return code, true, nil }
	no     = func(string) (string, bool, error) { return "", false, nil }
	broken = func(string) (string, bool, error) { return "", false, errors.New("the terminal closed") }
)

func edit(to string) func(string) (string, bool, error) {
	return func(string) (string, bool, error) { return to, true, nil }
}

func execsRun(m *sandboxtest.Manager) []string {
	var out []string
	for _, c := range m.Calls() {
		if strings.HasPrefix(c, "Exec ") {
			out = append(out, c)
		}
	}
	return out
}

func TestApproveRefusesEditsAndAllows(t *testing.T) {
	ctx := context.Background()
	m := sandboxtest.New()
	info, _ := m.Create(ctx, sandbox.Config{})
	a := &answers{next: []func(string) (string, bool, error){no, broken, edit("y = 7\ny"), yes, no, edit(`["echo", "edited"]`), edit(`echo edited`)}}
	tb := &agent.Toolbox{Manager: m, SandboxID: info.ID, Companions: true, Approve: a.approve}
	call := func(name, args string) agent.ToolResult { return tb.Call(ctx, name, json.RawMessage(args)) }

	if r := call("run_python", `{"code": "import os; os.system('rm -rf /')"}`); !r.IsError || !strings.Contains(r.Text, "The user refused to run this code") {
		t.Errorf("refused cell: %+v", r)
	}
	if r := call("run_python", `{"code": "x = 1"}`); !r.IsError || !strings.Contains(r.Text, "the terminal closed") {
		t.Errorf("approval that failed: %+v", r)
	}
	if cells := cellsRun(m); len(cells) != 0 {
		t.Fatalf("refused cells ran: %v", cells)
	}
	r := call("run_python", `{"code": "x = 1"}`)
	if r.IsError || !strings.Contains(r.Text, "[The user edited this code before it ran. What ran:]\ny = 7\ny") || !strings.Contains(r.Text, "7") {
		t.Errorf("edited cell: %+v", r)
	}
	if cells := cellsRun(m); len(cells) != 1 || !strings.Contains(cells[0], `"y = 7\ny"`) {
		t.Errorf("ran %v, want the edited cell only", cells)
	}
	if r := call("run_python", `{"code": "z = 2\nz"}`); r.IsError || strings.Contains(r.Text, "edited") || !strings.Contains(r.Text, "2") {
		t.Errorf("allowed cell: %+v", r)
	}

	if r := call("exec", `{"argv": ["rm", "-rf", "/workspace"]}`); !r.IsError || !strings.Contains(r.Text, "The user refused to run this command") {
		t.Errorf("refused exec: %+v", r)
	}
	if r := call("exec", `{"argv": ["echo", "original"]}`); r.IsError || !strings.Contains(r.Text, "edited") || strings.Contains(r.Text, "original") {
		t.Errorf("edited exec: %+v", r)
	}
	if r := call("exec", `{"argv": ["echo", "original"]}`); !r.IsError || !strings.Contains(r.Text, "not a JSON array of strings") {
		t.Errorf("exec edited into something else: %+v", r)
	}
	if ex := execsRun(m); len(ex) != 1 || !strings.Contains(ex[0], "edited") {
		t.Errorf("ran %v, want the edited command only", ex)
	}
	want := []string{
		"run_python: import os; os.system('rm -rf /')", "run_python: x = 1", "run_python: x = 1", "run_python: z = 2\nz",
		`exec: ["rm","-rf","/workspace"]`, `exec: ["echo","original"]`, `exec: ["echo","original"]`,
	}
	if strings.Join(a.asked, "|") != strings.Join(want, "|") {
		t.Errorf("asked %q, want %q", a.asked, want)
	}
	// Calls that run no code are not asked about.
	if r := call("write_file", `{"path": "/workspace/a", "content": "x"}`); r.IsError {
		t.Errorf("write_file: %+v", r)
	}
	if len(a.next) != 0 || len(a.asked) != len(want) {
		t.Errorf("asked %d times, want %d", len(a.asked), len(want))
	}
}

// refusingModel asks for one cell, then answers with what its tool result
// said.
type refusingModel struct{ seen []agent.ToolResult }

func (r *refusingModel) Generate(ctx context.Context, req agent.Request) (agent.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	for _, p := range last.Parts {
		if p.Result != nil {
			r.seen = append(r.seen, *p.Result)
		}
	}
	if len(r.seen) > 0 {
		return agent.Response{Message: agent.Message{Parts: []agent.Part{agent.TextPart("understood")}}}, nil
	}
	c := &agent.ToolCall{ID: "call_1", Name: agent.ToolRunPython}
	agent.ParseArgs(c, `{"code": "print('hi')"}`)
	return agent.Response{Message: agent.Message{Parts: []agent.Part{{Type: agent.PartToolCall, Call: c}}}}, nil
}

// Through the loop, a refusal reaches the model as the call's result.
func TestApproveRefusalReachesTheModel(t *testing.T) {
	ctx := context.Background()
	m := sandboxtest.New()
	info, _ := m.Create(ctx, sandbox.Config{})
	model := &refusingModel{}
	r := agent.Runner{Model: model, Tools: &agent.Toolbox{Manager: m, SandboxID: info.ID,
		Approve: func(context.Context, string, string) (string, bool, error) { return "", false, nil }}}
	out, err := r.Run(ctx, nil, "say hi")
	if err != nil || out.Answer != "understood" {
		t.Fatalf("run: %v, %+v", err, out)
	}
	if len(model.seen) != 1 || model.seen[0].CallID != "call_1" || !model.seen[0].IsError || !strings.Contains(model.seen[0].Text, "refused") {
		t.Errorf("the model saw %+v", model.seen)
	}
	if cells := cellsRun(m); len(cells) != 0 {
		t.Errorf("cells ran: %v", cells)
	}
}
