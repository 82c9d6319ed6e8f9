package mcpserver

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// TestUndoLastCellOnlyWithCheckpoints: undo_last_cell and list_checkpoints
// are listed only when the sessions' sandboxes keep every-cell
// checkpoints; there, undo takes the last cell back, even the first.
func TestUndoLastCellOnlyWithCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, on := range []bool{false, true} {
		m := sandboxtest.New()
		opts := Options{Toolbox: agent.Toolbox{Companions: true}}
		if on {
			opts.Config.Checkpoints = &sandbox.CheckpointConfig{EveryCell: true, Keep: 5}
		}
		srv := New(m, opts)
		cs, served := connect(t, ctx, srv)
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range tools.Tools {
			names = append(names, tl.Name)
		}
		if slices.Contains(names, agent.ToolUndoLastCell) != on || slices.Contains(names, agent.ToolListCheckpoints) != on {
			t.Errorf("checkpoints %v: tools %v", on, names)
		}
		if on {
			runPython(t, ctx, cs, "x = 1")
			r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: agent.ToolUndoLastCell, Arguments: map[string]any{}})
			if err != nil || r.IsError || !strings.Contains(text(t, r), "Undone") {
				t.Fatalf("undo_last_cell: %v %+v", err, r)
			}
			if r := runPython(t, ctx, cs, "x"); !strings.Contains(text(t, r), "NameError") {
				t.Errorf("x after undoing the first cell: %q", text(t, r))
			}
		}
		cs.Close()
		<-served
	}
}
