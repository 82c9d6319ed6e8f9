package main

import (
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
)

// TestLossNoteFromStateKept: the CLI's last line about the interpreter
// comes from state_kept and killed_by: a timeout whose interpreter was
// killed says the variables are gone, an interrupted one that they were
// kept, a plain cell nothing.
func TestLossNoteFromStateKept(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    cell.Result
		want string
	}{
		{"killed timeout", cell.Result{Status: cell.StatusTimeout, KilledBy: cell.KilledByTimeout}, "variables are gone"},
		{"interrupted", cell.Result{Status: cell.StatusTimeout, StateKept: true, KilledBy: cell.KilledByTimeout}, "variables were kept"},
		{"oom", cell.Result{Status: cell.StatusError, KilledBy: cell.KilledByOOM}, "variables are gone"},
		{"lost", cell.Result{Status: cell.StatusLost, KilledBy: cell.KilledBySignal}, "variables are gone"},
		{"fresh", cell.Result{Status: cell.StatusOK}, "fresh interpreter"},
		{"ok", cell.Result{Status: cell.StatusOK, StateKept: true}, ""},
	} {
		got := lossNote(tc.r)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want it to say %q", tc.name, got, tc.want)
		}
	}
	var out, errs strings.Builder
	printResult(cell.Result{Status: cell.StatusTimeout, KilledBy: cell.KilledByTimeout}, &out, &errs, t.TempDir(), streamed{})
	if !strings.Contains(errs.String(), "variables are gone") {
		t.Errorf("printResult of a killed timeout: stderr %q", errs.String())
	}
}
