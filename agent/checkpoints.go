package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cellvm/cellvm/sandbox"
)

// Time travel for a model. A sandbox created with every-cell checkpoints
// records one after each cell and command (sandbox/checkpoints.go), so a
// model that broke its own state (overwrote a DataFrame, deleted a file)
// can take its last cell back instead of rebuilding everything: the
// undo_last_cell tool, offered only on such a sandbox (Toolbox.Checkpoints),
// with list_checkpoints to see the history. StartCheckpoint records the
// fresh sandbox's state, so even the first cell can be undone.
//
// undo_last_cell goes back to the checkpoint before the last cell's
// (kind "cell"), not merely before the last checkpoint: the companions'
// commands (list_files runs ls) record checkpoints too, and undoing one of
// those would change nothing the model meant.

// Checkpoint tools.
const (
	ToolUndoLastCell    = "undo_last_cell"
	ToolListCheckpoints = "list_checkpoints"
)

// UndoSystem is what a system prompt adds when the sandbox keeps
// checkpoints.
const UndoSystem = "The sandbox records a checkpoint after each of your calls: if a call broke your state " +
	"(overwrote a variable, deleted a file), call undo_last_cell to put the sandbox back as it was before that call " +
	"instead of rebuilding everything. Effects outside the sandbox (network requests) are not undone."

// EveryCell reports whether a sandbox of cfg records a checkpoint after
// each cell, which undo_last_cell needs.
func EveryCell(cfg sandbox.Config) bool {
	return cfg.Checkpoints != nil && cfg.Checkpoints.EveryCell
}

// StartCheckpoint records a checkpoint of a new sandbox of cfg before its
// first cell when it has every-cell checkpoints, so undo_last_cell can
// take back the first cell too; otherwise it does nothing.
func StartCheckpoint(ctx context.Context, m sandbox.Manager, id string, cfg sandbox.Config) error {
	if !EveryCell(cfg) {
		return nil
	}
	if _, err := m.Checkpoint(ctx, id); err != nil {
		return fmt.Errorf("record the sandbox's first checkpoint: %w", err)
	}
	return nil
}

func checkpointSpecs() []ToolSpec {
	return []ToolSpec{
		{
			Name: ToolUndoLastCell,
			Description: "Undo your last run_python or run_code call: the sandbox's memory, variables, imports and files go back to how they were " +
				"before it (commands run after it are undone too). Use it when a call broke state you need, instead of rebuilding it. " +
				"Calling it again undoes the call before. Effects outside the sandbox (network requests it sent) are not undone.",
			Schema: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		},
		{
			Name:        ToolListCheckpoints,
			Description: "List the sandbox's kept checkpoints, oldest first: the number, what recorded it (cell, exec or manual) and the execution count then.",
			Schema:      json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		},
	}
}

// undoLastCell restores the checkpoint before the last cell's.
func (t *Toolbox) undoLastCell(ctx context.Context) ToolResult {
	cps, err := t.Manager.Checkpoints(ctx, t.SandboxID)
	if err != nil {
		return sandboxError(err)
	}
	last := -1
	for i, cp := range cps {
		if cp.Kind == sandbox.CheckpointCell {
			last = i
		}
	}
	switch {
	case last < 0:
		return ToolError("there is no cell to undo: no checkpoint after a run_python or run_code call is kept")
	case last == 0:
		return ToolError("the checkpoint before your last cell is no longer kept (the oldest are dropped); nothing was undone")
	}
	info, err := t.Manager.RestoreCheckpoint(ctx, t.SandboxID, cps[last-1].N)
	if err != nil {
		return sandboxError(err)
	}
	return ToolResult{Text: fmt.Sprintf("Undone: the sandbox is back at checkpoint %d (execution count %d), as it was before your last cell: "+
		"its variables, imports and files are as they were then. Effects outside the sandbox were not undone.", info.N, info.ExecutionCount)}
}

func (t *Toolbox) listCheckpoints(ctx context.Context) ToolResult {
	cps, err := t.Manager.Checkpoints(ctx, t.SandboxID)
	if err != nil {
		return sandboxError(err)
	}
	if len(cps) == 0 {
		return ToolResult{Text: "No checkpoints are kept yet."}
	}
	var b strings.Builder
	for _, cp := range cps {
		fmt.Fprintf(&b, "checkpoint %d: %s, execution count %d\n", cp.N, cp.Kind, cp.ExecutionCount)
	}
	return ToolResult{Text: b.String()}
}

// noteCheckpoint tells the model, with undo_last_cell offered, that no
// checkpoint was recorded after this cell: an undo would go back to
// before the last cell that has one.
func (t *Toolbox) noteCheckpoint(res ToolResult, failed string) ToolResult {
	if !t.Checkpoints || failed == "" {
		return res
	}
	failed, _ = ClipMiddle(failed, 200)
	res.Text += fmt.Sprintf("\n[No checkpoint was recorded after this call (%s): undo_last_cell would now go back to before the last call that has one.]", failed)
	return res
}
