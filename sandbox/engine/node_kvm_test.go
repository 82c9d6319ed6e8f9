package engine

import (
	"context"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

// TestGuestNodeCells runs the Node.js runtime in a real guest (one
// sandbox): Debian's node 18 with the image's TypeScript, notebook
// globals shared by JavaScript and TypeScript, a synchronous endless loop
// interrupted by its timeout with the state kept, and a heap bomb that is
// said as OutOfMemory with the next cell answering. guestinit/interp's
// host tests (TestNode*) cover the same driver on the host's node.
func TestGuestNodeCells(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	id := info.ID
	run := func(lang cell.Language, code string, timeout time.Duration) cell.Result {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, timeout+2*time.Minute)
		defer cancel()
		start := time.Now()
		r, err := m.RunCell(cctx, id, sandbox.Cell{Session: sandbox.Session{Language: lang}, Code: code, Timeout: timeout}, nil)
		if err != nil {
			t.Fatalf("%s cell %q: %v", lang, code, err)
		}
		t.Logf("%s cell %.40q: %s in %v", lang, code, r.Status, time.Since(start).Round(time.Millisecond))
		return r
	}
	main := func(r cell.Result) string {
		if m := r.MainResult(); m != nil {
			return m.Data[cell.MIMEText]
		}
		return ""
	}

	if r := run(cell.JavaScript, "let x = 41\nconsole.log(process.version)", time.Minute); r.Status != cell.StatusOK || r.Stdout == "" {
		t.Fatalf("first JavaScript cell: %+v", r)
	}
	if r := run(cell.TypeScript, "function inc(n: number): number { return n + 1 }\ninc(x)", 2*time.Minute); r.Status != cell.StatusOK || main(r) != "42" {
		t.Fatalf("TypeScript: %+v %+v", r, r.Error)
	}
	if r := run(cell.JavaScript, "while (true) {}", 2*time.Second); r.Status != cell.StatusTimeout || !r.StateKept {
		t.Fatalf("endless loop: %+v", r)
	}
	if r := run(cell.JavaScript, "await new Promise(r => setTimeout(() => r(x + 1), 10))", time.Minute); r.Status != cell.StatusOK || main(r) != "42" {
		t.Fatalf("after the timeout: %+v %+v", r, r.Error)
	}
	r := run(cell.JavaScript, "const a = []; while (true) a.push(new Array(1e5).fill(1.5))", 3*time.Minute)
	if r.Status != cell.StatusError || r.Error == nil || r.Error.Name != "OutOfMemory" || r.StateKept {
		t.Fatalf("heap bomb: %+v %+v", r, r.Error)
	}
	if r := run(cell.JavaScript, "typeof x", time.Minute); r.Status != cell.StatusOK || main(r) != "'undefined'" {
		t.Fatalf("after the heap bomb: %+v", r)
	}
}
