package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// spoilMemoryFile flips one bit of the first data byte of the memory file
// in dir (no VM has it mapped). It waits out a clock tick first, so the
// write moves the file's times (which is how the daemon sees a change to
// an image it trusted at its save).
func spoilMemoryFile(t *testing.T, dir string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	f, err := os.OpenFile(filepath.Join(dir, snapMemFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	if err != nil {
		t.Fatalf("the memory file has no data: %v", err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x04
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedImagesAreRefused, on a real VMM: the memory file's digest the
// VMM writes at a save matches what the daemon sums (checked here, as a
// restarted daemon checks it; a fork restores, with its variable), and
// says what the check costs; a snapshot whose memory
// file then loses a bit is refused at its next fork, before a VMM starts,
// leaving nothing behind; a paused sandbox's damaged image is refused at
// resume and the sandbox stays paused.
func TestDamagedImagesAreRefused(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	parent, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	runCell(t, m, parent.ID, "x = 41", 5*time.Minute)
	snap, err := m.Snapshot(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	dir := m.snapshotDir(snap.ID)
	state, err := os.Open(filepath.Join(dir, snapStateFile))
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	mem, err := os.Open(filepath.Join(dir, snapMemFile))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	start := time.Now()
	if err := snapshot.VerifyMemory(state, mem); err != nil {
		t.Fatalf("the VMM's own snapshot fails its digest: %v", err)
	}
	took := time.Since(start)
	t.Logf("digest check of %d MiB of data (a %d MiB memory file): %v, %.0f MiB/s",
		diskUsage(mem.Name())>>20, snap.MemoryMiB, took.Round(time.Millisecond), float64(diskUsage(mem.Name())>>20)/took.Seconds())

	fork, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("fork of a good snapshot: %v", err)
	}
	if got := mainText(t, m, fork.ID, "x"); got != "41" {
		t.Errorf("fork: x = %s, want 41", got)
	}
	if err := m.Delete(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}

	spoilMemoryFile(t, dir)
	before, _ := m.List(ctx)
	if _, err := m.Create(ctx, sandbox.Config{Snapshot: snap.ID}); !errors.Is(err, errImageCorrupt) {
		t.Errorf("fork of a damaged snapshot: %v, want errImageCorrupt", err)
	} else {
		t.Logf("refused: %v", err)
	}
	if after, _ := m.List(ctx); len(after) != len(before) {
		t.Errorf("the refused fork left a sandbox behind: %d before, %d after", len(before), len(after))
	}

	if err := m.Pause(ctx, parent.ID); err != nil {
		t.Fatal(err)
	}
	spoilMemoryFile(t, filepath.Join(m.sandboxDir(parent.ID), pausedDir))
	if err := m.Resume(ctx, parent.ID); !errors.Is(err, errImageCorrupt) {
		t.Errorf("resume of a damaged image: %v, want errImageCorrupt", err)
	}
	if in, err := m.Get(ctx, parent.ID); err != nil || in.State != sandbox.StatePaused {
		t.Errorf("after the refused resume: %+v, %v; want paused", in.State, err)
	}
}
