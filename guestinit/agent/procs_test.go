package agent

import (
	"bytes"
	"io"
	"log/slog"
	"testing"

	"github.com/cellvm/cellvm/guestinit/proto"
)

// The backlog keeps the most recent MaxProcBacklog bytes, whole or cut
// at the front, and merges small writes of one stream.
func TestBacklogKeepsTheLatestOutput(t *testing.T) {
	p := &gproc{t: newProcTable(ProcSpec{}, slog.New(slog.NewTextHandler(io.Discard, nil))), watchers: map[*procWatcher]struct{}{}}
	chunk := bytes.Repeat([]byte("a"), 1000)
	for i := 0; i < 3*proto.MaxProcBacklog/1000; i++ {
		p.emit(proto.ProcEvent{Kind: proto.ProcEventStdout, Data: chunk})
	}
	p.emit(proto.ProcEvent{Kind: proto.ProcEventStderr, Data: []byte("last")})
	total := 0
	for _, e := range p.backlog {
		total += len(e.Data)
		if len(e.Data) > proto.MaxProcChunk {
			t.Fatalf("a backlog event of %d bytes", len(e.Data))
		}
	}
	if total != p.backSize || total > proto.MaxProcBacklog || total < proto.MaxProcBacklog-proto.MaxProcChunk {
		t.Fatalf("backlog of %d bytes (counted %d)", total, p.backSize)
	}
	if last := p.backlog[len(p.backlog)-1]; last.Kind != proto.ProcEventStderr || string(last.Data) != "last" {
		t.Fatalf("the last event %+v", last)
	}
	if len(p.backlog) > 2*proto.MaxProcBacklog/proto.MaxProcChunk {
		t.Fatalf("%d backlog events: small writes were not merged", len(p.backlog))
	}
}

// A watcher that falls behind is dropped (its stream ends lagged); the
// process and the other watchers go on.
func TestSlowWatcherIsDropped(t *testing.T) {
	p := &gproc{t: newProcTable(ProcSpec{}, slog.New(slog.NewTextHandler(io.Discard, nil))), watchers: map[*procWatcher]struct{}{}}
	slow, fast := newWatcher(), newWatcher()
	p.watchers[slow], p.watchers[fast] = struct{}{}, struct{}{}
	chunk := bytes.Repeat([]byte("b"), proto.MaxProcChunk)
	for i := 0; i < watcherQueue/proto.MaxProcChunk+1; i++ {
		p.emit(proto.ProcEvent{Kind: proto.ProcEventStdout, Data: chunk})
		if i%8 == 0 {
			fast.take()
		}
	}
	if _, ended, lagged, _ := slow.take(); !ended || !lagged {
		t.Fatalf("the slow watcher: ended %v lagged %v", ended, lagged)
	}
	if _, ok := p.watchers[slow]; ok {
		t.Fatal("the slow watcher is still fed")
	}
	if _, ended, lagged, _ := fast.take(); ended || lagged {
		t.Fatal("the fast watcher was dropped")
	}
	p.finish(proto.ProcExit{ExitCode: 2})
	if _, ended, _, exit := fast.take(); !ended || exit.ExitCode != 2 {
		t.Fatalf("the fast watcher's end: %v %+v", ended, exit)
	}
}
