package control

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// serveCheckpoints serves a snapshot handler that counts its calls and
// cp on a new socket until the test ends.
func serveCheckpoints(t *testing.T, cp CheckpointHandler) (string, *atomic.Int32) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "control.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	var snapshots atomic.Int32
	hs := Handlers{Snapshot: func(_, _ *os.File, _ Request) error { snapshots.Add(1); return nil }, Checkpoint: cp}
	done := make(chan struct{})
	go func() { ServeHandlers(ln, hs, func() {}, slog.New(slog.DiscardHandler)); close(done) }()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return sock, &snapshots
}

// A checkpoint request reaches the checkpoint handler with its files and
// Full, never the snapshot handler, and its stats come back.
func TestCheckpointRequest(t *testing.T) {
	var gotFull []bool
	sock, snapshots := serveCheckpoints(t, func(state, memory *os.File, full bool) (CheckpointStats, error) {
		gotFull = append(gotFull, full)
		if _, err := memory.WriteString("pages"); err != nil {
			return CheckpointStats{}, err
		}
		return CheckpointStats{Layer: !full, Pages: 7, PauseMS: 3}, nil
	})
	state, memory := files(t)
	st, err := Checkpoint(ctx(t), sock, state, memory, false)
	if err != nil || st != (CheckpointStats{Layer: true, Pages: 7, PauseMS: 3}) {
		t.Fatalf("Checkpoint = %+v, %v", st, err)
	}
	if fi, _ := memory.Stat(); fi.Size() != 5 {
		t.Errorf("the handler did not get the memory file (%d bytes)", fi.Size())
	}
	if st, err := Checkpoint(ctx(t), sock, state, memory, true); err != nil || st.Layer {
		t.Fatalf("a full checkpoint = %+v, %v", st, err)
	}
	if len(gotFull) != 2 || gotFull[0] || !gotFull[1] {
		t.Errorf("the handler saw full = %v, want [false true]", gotFull)
	}
	if n := snapshots.Load(); n != 0 {
		t.Errorf("a checkpoint took %d snapshots", n)
	}
}

// A VMM without checkpoints refuses them as bad requests, and a failing
// checkpoint's error comes back with no stats.
func TestCheckpointRefused(t *testing.T) {
	sock, snapshots := serveCheckpoints(t, nil)
	state, memory := files(t)
	if _, err := Checkpoint(ctx(t), sock, state, memory, false); !errors.Is(err, CodeBadRequest) {
		t.Errorf("a VMM without checkpoints: %v, want bad_request", err)
	}
	sock2, _ := serveCheckpoints(t, func(_, _ *os.File, _ bool) (CheckpointStats, error) {
		return CheckpointStats{Pages: 1}, errors.New("disk full")
	})
	if _, err := Checkpoint(ctx(t), sock2, state, memory, false); err == nil {
		t.Error("a failed checkpoint answered ok")
	}
	if n := snapshots.Load(); n != 0 {
		t.Errorf("a refused checkpoint took %d snapshots", n)
	}
}
