package mcpserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// ignoresSIGINT is the cell of the proof: it ignores the interrupt,
// so the guest kills the interpreter at the end of the grace period.
const ignoresSIGINT = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"

// TestKilledInterpreterSaysVariablesAreGone: a cell whose interpreter the
// guest had to kill after a timeout (status "timeout", state_kept false,
// killed_by timeout, as the guest reports it) reaches the model through
// MCP as an error whose text says "variables are gone", never that they
// were kept; an interrupted timeout says they are still there.
func TestKilledInterpreterSaysVariablesAreGone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m := sandboxtest.New()
	m.Script = func(ctx context.Context, c *sandboxtest.Cell) (cell.Result, error) {
		switch c.Code {
		case ignoresSIGINT:
			return cell.Result{Status: cell.StatusTimeout, StateKept: false, KilledBy: cell.KilledByTimeout,
				Error: &cell.Error{Name: "TimeoutError", Value: "the cell ran past its time limit and did not stop within 2s of the interrupt; the interpreter was killed and restarted, so all variables and imports are lost"}}, nil
		case "interrupted":
			return cell.Result{Status: cell.StatusTimeout, StateKept: true, KilledBy: cell.KilledByTimeout,
				Error: &cell.Error{Name: "TimeoutError", Value: "the cell ran past its time limit and was interrupted; variables and imports are kept"}}, nil
		}
		return cell.Result{Status: cell.StatusOK, StateKept: true}, nil
	}
	cs, served := connect(t, ctx, New(m, Options{}))
	defer func() { cs.Close(); <-served }()

	r := runPython(t, ctx, cs, ignoresSIGINT)
	got := text(t, r)
	if !r.IsError || !strings.Contains(got, "variables are gone") || strings.Contains(got, "still there") {
		t.Errorf("killed interpreter through MCP: error %v, text %q; want an error saying \"variables are gone\"", r.IsError, got)
	}
	r = runPython(t, ctx, cs, "interrupted")
	got = text(t, r)
	if !r.IsError || strings.Contains(got, "variables are gone") || !strings.Contains(got, "still there") {
		t.Errorf("interrupted timeout through MCP: error %v, text %q; want the variables said kept", r.IsError, got)
	}
}
