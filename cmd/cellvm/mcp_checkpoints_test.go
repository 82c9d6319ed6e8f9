package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/api"
)

// TestMCPCheckpoints: serve --mcp-checkpoints gives MCP sessions' sandboxes
// every-cell checkpoints, offers undo_last_cell, and the undo takes the
// last cell back.
func TestMCPCheckpoints(t *testing.T) {
	d := startRemoteDaemon(t, "--mcp-checkpoints")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "cellvm-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + api.MCPPath, HTTPClient: d.httpClient(t, remoteToken)}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	names := mcpToolNames(t, ctx, cs)
	if !slices.Contains(names, agent.ToolUndoLastCell) || !slices.Contains(names, agent.ToolListCheckpoints) {
		t.Fatalf("tools %v lack the checkpoint tools", names)
	}
	call := func(name string, args map[string]any) string {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.IsError {
			t.Fatalf("%s: %s", name, mcpText(r))
		}
		return mcpText(r)
	}
	call(agent.ToolRunPython, map[string]any{"code": "x = 1"})
	call(agent.ToolRunPython, map[string]any{"code": "x = 2"})
	if out := call(agent.ToolUndoLastCell, map[string]any{}); !strings.Contains(out, "Undone") {
		t.Errorf("undo_last_cell: %s", out)
	}
	if out := call(agent.ToolRunPython, map[string]any{"code": "print(x)"}); !strings.Contains(out, "1") || strings.Contains(out, "2") {
		t.Errorf("x after the undo: %s, want 1", out)
	}
}

// mcpToolNames lists the session's tools' names.
func mcpToolNames(t *testing.T, ctx context.Context, cs *mcp.ClientSession) []string {
	t.Helper()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	return names
}
