package mcpserver

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/modeltest"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// connect starts a session of srv over an in-memory transport and returns
// the client's side and a channel that yields Serve's return.
func connect(t *testing.T, ctx context.Context, srv *Server) (*mcp.ClientSession, chan error) {
	t.Helper()
	st, ct := mcp.NewInMemoryTransports()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, st) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatalf("client connect: %v", err)
	}
	return cs, served
}

func text(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func runPython(t *testing.T, ctx context.Context, cs *mcp.ClientSession, code string) *mcp.CallToolResult {
	t.Helper()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: agent.ToolRunPython, Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatalf("CallTool(%q): %v", code, err)
	}
	return r
}

func TestSessionToolsStateAndCleanup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := sandboxtest.New()
	m.Script = modeltest.DefaultScriptCells()
	srv := New(m, Options{Toolbox: agent.Toolbox{Companions: true, Languages: []cell.LanguageInfo{{Name: cell.Python}, {Name: cell.JavaScript, Version: "18.19.0"}}}})

	cs, served := connect(t, ctx, srv)
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Name == agent.ToolRunPython && !strings.Contains(tl.Description, "persists") {
			t.Errorf("run_python description does not say state persists: %q", tl.Description)
		}
		if tl.Name == agent.ToolRunCode && !strings.Contains(tl.Description, "JavaScript (Node.js) 18.19.0") {
			t.Errorf("run_code's description does not name the image's JavaScript: %q", tl.Description)
		}
	}
	if got := strings.Join(names, ","); got != "exec,list_files,read_file,restart_python,run_code,run_python,upload_file,write_file" {
		t.Errorf("tools = %s", got)
	}
	if m.Live() != 0 {
		t.Errorf("listing tools created %d sandboxes; want none before the first call", m.Live())
	}

	// Two calls share one interpreter.
	if r := runPython(t, ctx, cs, "x = 41"); r.IsError {
		t.Fatalf("x = 41: %s", text(t, r))
	}
	r := runPython(t, ctx, cs, "print(x)")
	if r.IsError || !strings.Contains(text(t, r), "41") {
		t.Fatalf("print(x) in the same session = %q (error %v); want 41", text(t, r), r.IsError)
	}
	if m.Live() != 1 {
		t.Fatalf("%d sandboxes live, want 1", m.Live())
	}

	// A figure comes back as image content.
	r = runPython(t, ctx, cs, modeltest.CodeChart)
	var img *mcp.ImageContent
	for _, c := range r.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" || !bytes.Equal(img.Data, sandboxtest.ChartPNG()) {
		t.Errorf("chart: no PNG image content in %+v", r.Content)
	}
	// An error is a tool error the model reads, not a protocol error.
	r = runPython(t, ctx, cs, modeltest.CodeLoad)
	if !r.IsError || !strings.Contains(text(t, r), "KeyError: 'B'") || strings.Contains(text(t, r), "\x1b") {
		t.Errorf("KeyError result = %q (error %v)", text(t, r), r.IsError)
	}
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: agent.ToolExec, Arguments: map[string]any{"argv": []string{"echo", "hi"}}})
	if err != nil || r.IsError || !strings.Contains(text(t, r), "hi") {
		t.Errorf("exec echo hi = %v, %v", r, err)
	}

	// A second session has its own sandbox: x is not defined there.
	cs2, served2 := connect(t, ctx, srv)
	r = runPython(t, ctx, cs2, "print(x)")
	if !r.IsError || !strings.Contains(text(t, r), "NameError") {
		t.Errorf("print(x) in another session = %q; want a NameError", text(t, r))
	}
	if m.Live() != 2 {
		t.Errorf("%d sandboxes live, want 2", m.Live())
	}

	// Ending a session deletes its sandbox and only its sandbox.
	cs.Close()
	select {
	case <-served:
	case <-ctx.Done():
		t.Fatal("Serve did not return after the client closed")
	}
	if d := m.Deleted(); len(d) != 1 || d[0] != "sb-fake1" {
		t.Errorf("deleted %v, want [sb-fake1]", d)
	}
	cs2.Close()
	<-served2
	if m.Live() != 0 {
		t.Errorf("%d sandboxes left after both sessions ended", m.Live())
	}
}

func TestSessionWithoutCallsCreatesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := sandboxtest.New()
	srv := New(m, Options{})
	cs, served := connect(t, ctx, srv)
	cs.Close()
	<-served
	if m.Live() != 0 || len(m.Deleted()) != 0 {
		t.Errorf("live %d, deleted %v; want nothing created", m.Live(), m.Deleted())
	}
}

// TestServeOverStdioPipes is how `cellvm mcp` runs: newline-delimited
// JSON over a reader and a writer; the client closing its end ends Serve
// cleanly and deletes the sandbox.
func TestServeOverStdioPipes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m := sandboxtest.New()
	srv := New(m, Options{})
	cr, sw := io.Pipe() // server -> client
	sr, cw := io.Pipe() // client -> server
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, &mcp.IOTransport{Reader: sr, Writer: sw}) }()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := runPython(t, ctx, cs, "y = 7"); r.IsError {
		t.Fatalf("y = 7: %s", text(t, r))
	}
	if r := runPython(t, ctx, cs, "y"); !strings.Contains(text(t, r), "7") {
		t.Fatalf("y = %q", text(t, r))
	}
	cs.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve after the client closed = %v; want nil", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return")
	}
	if m.Live() != 0 || len(m.Deleted()) != 1 {
		t.Errorf("live %d, deleted %v", m.Live(), m.Deleted())
	}
}
