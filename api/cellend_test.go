package api

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// endThenCleanup is a manager that, like the VM manager, emits a cell's
// end event before RunCell has returned (and so before the sandbox takes
// another cell). It waits for the client to report the end event, or two
// seconds, before returning.
type endThenCleanup struct {
	*sandboxtest.Manager
	clientHasEnd chan struct{}
	returned     atomic.Bool
}

func (m *endThenCleanup) RunCell(ctx context.Context, id string, c sandbox.Cell, onEvent func(cell.Event)) (cell.Result, error) {
	res := cell.Result{Status: cell.StatusOK, Stdout: "x\n", StateKept: true}
	onEvent(cell.Event{Type: cell.EventStdout, Text: "x\n"})
	onEvent(cell.Event{Type: cell.EventEnd, End: &res})
	select {
	case <-m.clientHasEnd:
	case <-time.After(2 * time.Second):
	}
	m.returned.Store(true)
	return res, nil
}

// TestStreamedEndComesAfterTheCellIsDone: a streaming client gets the end
// event only once the manager's RunCell has returned, so a client that
// starts its next cell as soon as it has the end is not refused as busy.
func TestStreamedEndComesAfterTheCellIsDone(t *testing.T) {
	m := &endThenCleanup{Manager: sandboxtest.New(), clientHasEnd: make(chan struct{})}
	sock := filepath.Join(shortTempDir(t), "api.sock")
	ln, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer(NewServer(m, nil))
	go srv.Serve(ln)
	defer srv.Close()
	c := NewClient(sock)
	defer c.Close()
	info, err := c.Create(context.Background(), sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var types []cell.EventType
	returnedAtEnd := false
	_, err = c.RunCell(context.Background(), info.ID, sandbox.Cell{Code: "x", Timeout: 0}, func(ev cell.Event) {
		types = append(types, ev.Type)
		if ev.Type == cell.EventEnd {
			returnedAtEnd = m.returned.Load()
			close(m.clientHasEnd)
		}
	})

	if err != nil {
		t.Fatal(err)
	}
	if len(types) != 2 || types[0] != cell.EventStdout || types[1] != cell.EventEnd {
		t.Errorf("events %v, want stdout then end", types)
	}
	if !returnedAtEnd {
		t.Error("the client had the end event while the manager's RunCell was still running")
	}
}
