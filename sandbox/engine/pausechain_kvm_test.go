package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/vmm/snapshot"
)

// TestPauseChainKeepsEveryVariable: a sandbox paused and resumed five
// times, a variable set between each, keeps every variable. Its pauses
// after the first write a layer over the image it resumed from, and the
// daemon folds that chain into a whole image while it stays paused
// (compact.go), so every later pause is again a layer over one file and
// none writes a whole image at the chain's bound. The last round resumes
// at once, during its fold, which the resume cancels (or waits for).
func TestPauseChainKeepsEveryVariable(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, sb.ID)
	paused := filepath.Join(m.sandboxDir(sb.ID), pausedDir)
	last := snapshot.MaxLayers + 1
	for round := 1; round <= last; round++ {
		runCell(t, m, sb.ID, fmt.Sprintf("v%d = %d * 7", round, round), 5*time.Minute)
		start := time.Now()
		if err := m.Pause(ctx, sb.ID); err != nil {
			t.Fatalf("pause %d: %v", round, err)
		}
		took := time.Since(start)
		want := min(round-1, 1) // a booted machine's image is whole
		got := imageChain(paused)
		t.Logf("pause %d: %v, %d files under its memory file, image %d KiB", round, took.Round(time.Millisecond), got, dirUsage(paused)>>10)
		if got != want {
			t.Errorf("pause %d: the image is a layer over %d files, want %d", round, got, want)
		}
		if round < last {
			foldStart := time.Now()
			waitFold(t, m, sb.ID)
			t.Logf("fold %d: %v, image %d KiB", round, time.Since(foldStart).Round(time.Millisecond), dirUsage(paused)>>10)
			if n := imageChain(paused); n != 0 {
				t.Errorf("after the fold of pause %d the image is a layer over %d files", round, n)
			}
		}
		if err := m.Resume(ctx, sb.ID); err != nil {
			t.Fatalf("resume %d: %v", round, err)
		}
		for v := 1; v <= round; v++ {
			if got := mainText(t, m, sb.ID, fmt.Sprintf("v%d", v)); got != fmt.Sprint(v*7) {
				t.Errorf("after resume %d: v%d = %s, want %d", round, v, got, v*7)
			}
		}
	}
}
