package chat

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/modeltest"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// TestChatTellsTheModelItMayUndo: with every-cell checkpoints the system
// prompt says the model may undo and the undo tool is offered, and the
// model's undo_last_cell takes its last cell back; without them, neither.
func TestChatTellsTheModelItMayUndo(t *testing.T) {
	for _, on := range []bool{true, false} {
		srv := modeltest.New(modeltest.Script{
			{Calls: []modeltest.Call{{ID: "c1", Name: "run_python", Args: `{"code": "x = 1"}`}}},
			{Calls: []modeltest.Call{{ID: "c2", Name: "run_python", Args: `{"code": "x = 2"}`}}},
			{Calls: []modeltest.Call{{ID: "c3", Name: "undo_last_cell", Args: `{}`}}},
			{Calls: []modeltest.Call{{ID: "c4", Name: "run_python", Args: `{"code": "print(x)"}`}}},
			{Text: "done"},
		})
		hs := srv.Start()
		model, _, _ := ModelFromEnv("anthropic", "", 0, env(map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": hs.URL}))
		m := sandboxtest.New()
		cfg := sandbox.Config{}
		if on {
			cfg.Checkpoints = &sandbox.CheckpointConfig{EveryCell: true}
		}
		var stdout, stderr bytes.Buffer
		_, err := Run(context.Background(), Options{Manager: m, Model: model, Question: "q", Config: cfg, OutDir: t.TempDir(), Stdout: &stdout, Stderr: &stderr})
		hs.Close()
		if err != nil {
			t.Fatalf("checkpoints %v: Run: %v\n%s", on, err, stderr.String())
		}
		reqs := srv.Requests()
		told := strings.Contains(string(reqs[0].Body), "undo_last_cell to put the sandbox back")
		offered := slices.Contains(reqs[0].Tools, agent.ToolUndoLastCell)
		if told != on || offered != on {
			t.Errorf("checkpoints %v: the system prompt tells of undo: %v, the tool is offered: %v", on, told, offered)
		}
		log := stderr.String()
		if on && !strings.Contains(log, "Undone") {
			t.Errorf("checkpoints on: the undo did not happen:\n%s", log)
		}
		// After the undo, print(x) shows 1; without checkpoints the undo is
		// a tool error and x stays 2.
		want := map[bool]string{true: "1", false: "2"}[on]
		if got := lastOutput(log); !strings.Contains(got, want) {
			t.Errorf("checkpoints %v: print(x) after the undo: %q, want %s\n%s", on, got, want, log)
		}
	}
}

// lastOutput is the log after the last tool result's header.
func lastOutput(log string) string {
	i := strings.LastIndex(log, "<< run_python")
	if i < 0 {
		return ""
	}
	return log[i:]
}
