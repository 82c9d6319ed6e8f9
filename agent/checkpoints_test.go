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

// TestUndoLastCell: on a sandbox with every-cell checkpoints, undo_last_cell
// takes back the last run_python call, past the commands after it, and a
// second one the call before, down to the fresh sandbox StartCheckpoint
// recorded; past that it says there is nothing to undo.
func TestUndoLastCell(t *testing.T) {
	ctx := context.Background()
	m := sandboxtest.New()
	cfg := sandbox.Config{Checkpoints: &sandbox.CheckpointConfig{EveryCell: true}}
	info, err := m.Create(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.StartCheckpoint(ctx, m, info.ID, info.Config); err != nil {
		t.Fatal(err)
	}
	tb := &agent.Toolbox{Manager: m, SandboxID: info.ID, Companions: true, Checkpoints: true}
	call := func(name, args string) agent.ToolResult { return tb.Call(ctx, name, json.RawMessage(args)) }
	value := func() string { return strings.TrimSpace(call("run_python", `{"code": "print(x)"}`).Text) }

	call("run_python", `{"code": "x = 1"}`)
	call("run_python", `{"code": "x = 2"}`)
	call("exec", `{"argv": ["echo", "after"]}`)
	if r := call("undo_last_cell", `{}`); r.IsError || !strings.Contains(r.Text, "Undone") || !strings.Contains(r.Text, "execution count 1") {
		t.Fatalf("undo_last_cell = %+v", r)
	}
	if v := value(); !strings.Contains(v, "1") {
		t.Errorf("x after one undo: %q, want 1", v)
	}
	// value's print(x) was a cell: undo it, then undo x = 1.
	call("undo_last_cell", `{}`)
	if r := call("undo_last_cell", `{}`); r.IsError {
		t.Fatalf("undo of the first cell = %+v", r)
	}
	if v := value(); !strings.Contains(v, "NameError") {
		t.Errorf("x after undoing the first cell: %q, want a NameError", v)
	}
	call("undo_last_cell", `{}`) // the print(x) that failed
	if r := call("undo_last_cell", `{}`); !r.IsError || !strings.Contains(r.Text, "no cell to undo") {
		t.Errorf("undo with nothing left = %+v", r)
	}
	if r := call("list_checkpoints", `{}`); r.IsError || !strings.HasPrefix(r.Text, "checkpoint 1: manual, execution count 0") {
		t.Errorf("list_checkpoints = %+v", r)
	}
	// A cell whose checkpoint failed says so; the next one does not.
	m.Fail("Checkpoint", errors.New("no space left on device"))
	if r := call("run_python", `{"code": "x = 3"}`); r.IsError || !strings.Contains(r.Text, "No checkpoint was recorded after this call (no space left on device)") {
		t.Errorf("a cell without its checkpoint = %+v", r)
	}
	m.Fail("Checkpoint", nil)
	if r := call("run_python", `{"code": "x = 4"}`); strings.Contains(r.Text, "No checkpoint") {
		t.Errorf("a cell with its checkpoint = %+v", r)
	}
}

// TestCheckpointToolsOnlyWithCheckpoints: the tools are offered only when
// the sandbox keeps every-cell checkpoints, and StartCheckpoint records
// nothing otherwise.
func TestCheckpointToolsOnlyWithCheckpoints(t *testing.T) {
	has := func(tb agent.Toolbox, name string) bool { return tb.Has(name) }
	if has(agent.Toolbox{Companions: true}, agent.ToolUndoLastCell) || has(agent.Toolbox{}, agent.ToolListCheckpoints) {
		t.Error("checkpoint tools offered without checkpoints")
	}
	if !has(agent.Toolbox{Checkpoints: true}, agent.ToolUndoLastCell) || !has(agent.Toolbox{Checkpoints: true, Companions: true}, agent.ToolListCheckpoints) {
		t.Error("checkpoint tools not offered with checkpoints")
	}
	ctx := context.Background()
	m := sandboxtest.New()
	info, _ := m.Create(ctx, sandbox.Config{})
	tb := &agent.Toolbox{Manager: m, SandboxID: info.ID}
	if r := tb.Call(ctx, agent.ToolUndoLastCell, nil); !r.IsError || !strings.Contains(r.Text, "no tool named") {
		t.Errorf("undo_last_cell without checkpoints = %+v", r)
	}
	for _, cfg := range []sandbox.Config{{}, {Checkpoints: &sandbox.CheckpointConfig{}}} {
		info, _ := m.Create(ctx, cfg)
		if err := agent.StartCheckpoint(ctx, m, info.ID, info.Config); err != nil {
			t.Fatal(err)
		}
		if cfg.Checkpoints != nil {
			if cps, _ := m.Checkpoints(ctx, info.ID); len(cps) != 0 {
				t.Errorf("StartCheckpoint without every_cell recorded %v", cps)
			}
		}
	}
}
