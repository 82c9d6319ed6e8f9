package cellpolicy

import (
	"context"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// A process is asked about as an exec: a refused one never reaches the
// inner manager, an allowed one runs.
func TestRefusesProcess(t *testing.T) {
	m, inner, id := setup(t, refuseOSSystem, 0, nil)
	var ends []sandbox.ProcessEvent
	exit, err := m.StartProcess(context.Background(), id, sandbox.ProcessRequest{Argv: []string{"python3", "-c", "import os; os.system('id')"}},
		func(e sandbox.ProcessEvent) error { ends = append(ends, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != ExecExitCode || exit.Error != "PolicyRefused: os.system is not allowed here" || len(ends) != 1 || ends[0].Kind != sandbox.ProcessEnd {
		t.Errorf("refused process: %+v, events %+v", exit, ends)
	}
	for _, c := range inner.Calls() {
		if strings.HasPrefix(c, "StartProcess") {
			t.Fatalf("the inner manager saw %s", c)
		}
	}
	exit, err = m.StartProcess(context.Background(), id, sandbox.ProcessRequest{Argv: []string{"echo", "hi"}}, nil)
	if err != nil || exit.ExitCode != 0 || exit.Error != "" {
		t.Errorf("allowed process: %+v, %v", exit, err)
	}
}
