package sandboxtest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// TestPauseResumeAndLost: a pause keeps the variables, a cell resumes
// the sandbox, a resume of a running one is busy; a lost sandbox refuses
// what needs its guest.
func TestPauseResumeAndLost(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{})
	run(t, m, id, "x = 7")
	if err := m.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := m.Pause(ctx, id); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("a second pause: %v, want ErrBusy", err)
	}
	if info, _ := m.Get(ctx, id); info.State != sandbox.StatePaused {
		t.Errorf("state %s, want paused", info.State)
	}
	if res, _ := run(t, m, id, "print(x)"); res.Stdout != "7\n" {
		t.Errorf("x after a pause: %+v", res)
	}
	if !slices.Contains(m.Happened(), "resume "+id+" (by a call)") {
		t.Errorf("the cell did not resume the sandbox: %v", m.Happened())
	}
	if err := m.Resume(ctx, id); !errors.Is(err, sandbox.ErrBusy) || !strings.Contains(err.Error(), "not paused") {
		t.Errorf("resume of a running sandbox: %v", err)
	}
	if err := m.Lose(id, sandbox.LostInfo{Reason: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"echo"}, Timeout: time.Second}); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("exec on a lost sandbox: %v", err)
	}
	if err := m.Pause(ctx, id); !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("pause of a lost sandbox: %v", err)
	}
	if err := m.Delete(ctx, id); err != nil || m.Live() != 0 || !slices.Equal(m.Deleted(), []string{id}) {
		t.Errorf("delete: %v, live %d, deleted %v", err, m.Live(), m.Deleted())
	}
}

// TestForkHasTheSnapshotsState: a fork starts with the snapshot's
// variables, files, machine and env, and nothing done after it.
func TestForkHasTheSnapshotsState(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{VCPUs: 2, MemoryMiB: 1024, Env: map[string]string{"A": "1"}})
	run(t, m, id, "x = 41")
	if _, err := m.Upload(ctx, id, "/workspace/f", strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	snap, err := m.Snapshot(ctx, id)
	if err != nil || !sandbox.ValidSnapshotID(snap.ID) || snap.VCPUs != 2 || snap.MemoryMiB != 1024 {
		t.Fatalf("Snapshot: %+v, %v", snap, err)
	}
	run(t, m, id, "after = 1")
	if _, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID, MemoryMiB: 512}); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("a fork with other memory: %v, want ErrInvalid", err)
	}
	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil || fork.Config.VCPUs != 2 || fork.Config.MemoryMiB != 1024 || fork.Config.Env["A"] != "1" || fork.StartedFrom != sandbox.StartedFromSnapshot {
		t.Fatalf("fork: %+v, %v", fork, err)
	}
	if res, _ := run(t, m, fork.ID, "print(x)"); res.Stdout != "41\n" {
		t.Errorf("x in the fork: %+v", res)
	}
	if res, _ := run(t, m, fork.ID, "after"); res.Status == cell.StatusOK {
		t.Errorf("the fork has what was done after the snapshot: %+v", res)
	}
	var b bytes.Buffer
	if _, err := m.Download(ctx, fork.ID, "/workspace/f", &b); err != nil || b.String() != "data" {
		t.Errorf("the fork's file: %q, %v", b.String(), err)
	}
	if err := m.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.GetSnapshot(ctx, snap.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("a deleted snapshot: %v", err)
	}
}

// TestWorkspaceHeldAndKept: one sandbox at a time holds a workspace, its
// files outlive the sandbox, and a held one is not deleted.
func TestWorkspaceHeldAndKept(t *testing.T) {
	m := sandboxtest.New()
	first, err := m.Create(ctx, sandbox.Config{Workspace: "w"})
	if err != nil || first.StartedFrom != sandbox.StartedFromBoot {
		t.Fatalf("create: %+v, %v", first, err)
	}
	if _, err := m.Create(ctx, sandbox.Config{Workspace: "w"}); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("a second holder: %v, want ErrBusy", err)
	}
	if err := m.DeleteWorkspace(ctx, "w"); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("delete of a held workspace: %v, want ErrBusy", err)
	}
	if _, err := m.Snapshot(ctx, first.ID); !errors.Is(err, sandbox.ErrNotSupported) {
		t.Errorf("snapshot with a workspace: %v, want ErrNotSupported", err)
	}
	m.Upload(ctx, first.ID, "/workspace/kept", strings.NewReader("kept"))
	m.Upload(ctx, first.ID, "/tmp/own", strings.NewReader("own"))
	m.Delete(ctx, first.ID)
	second := create(t, m, sandbox.Config{Workspace: "w"})
	var b bytes.Buffer
	if _, err := m.Download(ctx, second, "/workspace/kept", &b); err != nil || b.String() != "kept" {
		t.Errorf("the workspace's file in the next sandbox: %q, %v", b.String(), err)
	}
	if _, err := m.Download(ctx, second, "/tmp/own", io.Discard); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the first sandbox's own file: %v, want ErrNotFound", err)
	}
	ws, _ := m.Workspaces(ctx)
	if len(ws) != 1 || ws[0].Sandbox != second || ws[0].DiskBytes != 4 {
		t.Errorf("Workspaces: %+v", ws)
	}
}

// TestImagesInUse: an unknown image is refused naming the images, and an
// image is deleted only while no sandbox or snapshot uses it.
func TestImagesInUse(t *testing.T) {
	m := sandboxtest.New()
	if _, err := m.Create(ctx, sandbox.Config{Image: "nope"}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "default, scratch, team") {
		t.Errorf("an unknown image: %v", err)
	}
	id := create(t, m, sandbox.Config{Image: "team"})
	if err := m.DeleteImage(ctx, "team"); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("delete of a used image: %v, want ErrBusy", err)
	}
	snap, _ := m.Snapshot(ctx, id)
	m.Delete(ctx, id)
	if err := m.DeleteImage(ctx, "team"); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("delete of a snapshot's image: %v, want ErrBusy", err)
	}
	m.DeleteSnapshot(ctx, snap.ID)
	if err := m.DeleteImage(ctx, "team"); err != nil {
		t.Errorf("delete of an unused image: %v", err)
	}
	if err := m.DeleteImage(ctx, sandbox.DefaultImage); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("delete of the default image: %v, want ErrInvalid", err)
	}
	imgs, _ := m.Images(ctx)
	if len(imgs) != 2 || imgs[0].Name != sandbox.DefaultImage || imgs[1].Name != "scratch" {
		t.Errorf("Images: %+v", imgs)
	}
}

// TestCaps: the caps on sandboxes, memory and snapshot disk are full.
func TestCaps(t *testing.T) {
	m := sandboxtest.New()
	m.MaxSandboxes, m.MaxMemoryMiB, m.MaxDiskMiB = 2, 1536, 1024
	a := create(t, m, sandbox.Config{MemoryMiB: 1024})
	if _, err := m.Create(ctx, sandbox.Config{MemoryMiB: 1024}); !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("past the memory cap: %v, want ErrFull", err)
	}
	b := create(t, m, sandbox.Config{MemoryMiB: 256})
	if _, err := m.Create(ctx, sandbox.Config{MemoryMiB: 64}); !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("past the sandbox cap: %v, want ErrFull", err)
	}
	if c, _ := m.Capacity(ctx); c.MaxSandboxes != 2 || c.Sandboxes != 2 || c.MaxMemoryMiB != 1536 || c.MemoryMiBUsed != 1280 || c.VCPUsUsed != 2 {
		t.Errorf("Capacity: %+v", c)
	}
	if err := m.Pause(ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(ctx, a); !errors.Is(err, sandbox.ErrFull) || !strings.Contains(err.Error(), "snapshot disk cap") {
		t.Errorf("past the disk cap: %v, want ErrFull", err)
	}
}

// TestObservation: events follow the calls, a log follower gets the tail
// and later lines until the sandbox goes, and Fail and Calls work.
func TestObservation(t *testing.T) {
	m := sandboxtest.New()
	st, err := m.Events(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	id := create(t, m, sandbox.Config{})
	m.AppendLog(id, sandbox.LogConsole, "one", "two")
	lines := make(chan string, 4)
	done := make(chan error, 1)
	go func() {
		done <- m.Logs(ctx, id, sandbox.LogRequest{Source: sandbox.LogConsole, Tail: 1, Follow: true},
			func(l sandbox.LogLine) error { lines <- l.Text; return nil })
	}()
	if l := <-lines; l != "two" {
		t.Errorf("tail: %q", l)
	}
	m.AppendLog(id, sandbox.LogConsole, "three")
	if l := <-lines; l != "three" {
		t.Errorf("followed: %q", l)
	}
	m.Pause(ctx, id)
	run(t, m, id, "x = 1")
	m.SetNetwork(ctx, id, sandbox.NetworkPolicy{Allow: []string{"pypi.org"}})
	m.Lose(id, sandbox.LostInfo{Reason: "gone"})
	m.Delete(ctx, id)
	if err := <-done; err != nil {
		t.Errorf("the follow ended with %v", err)
	}
	var got []sandbox.EventType
	for range 6 {
		ev, err := st.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Type)
	}
	want := []sandbox.EventType{sandbox.EventCreated, sandbox.EventPaused, sandbox.EventResumed, sandbox.EventPolicyChanged, sandbox.EventLost, sandbox.EventDeleted}
	if !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}

	boom := errors.New("boom")
	m.Fail("Get", boom)
	if _, err := m.Get(ctx, id); err != boom {
		t.Errorf("Get after Fail: %v", err)
	}
	m.Fail("Get", nil)
	if _, err := m.Get(ctx, id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get after Fail(nil): %v", err)
	}
	if calls := m.Calls(); calls[0] != "Events" || calls[1] != "Create" || !slices.Contains(calls, "Delete "+id) || calls[len(calls)-1] != "Get "+id {
		t.Errorf("calls %q", calls)
	}
}

// TestDownloadFailsMidway: /workspace/fail-midway writes part of a file
// and then fails.
func TestDownloadFailsMidway(t *testing.T) {
	m := sandboxtest.New()
	id := create(t, m, sandbox.Config{})
	n, err := m.Download(context.Background(), id, "/workspace/fail-midway", io.Discard)
	if n != 100<<10 || !errors.Is(err, sandbox.ErrLost) {
		t.Errorf("fail-midway: %d bytes, %v", n, err)
	}
}
