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
// times, a variable set between each, keeps every variable; its pauses
// after the first write layers over the image it resumed from (1, 2, 3
// files under it), and the fifth flattens the chain at its bound.
func TestPauseChainKeepsEveryVariable(t *testing.T) {
	m := newRigManager(t)
	ctx := context.Background()
	sb, err := m.Create(ctx, sandbox.Config{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Delete(ctx, sb.ID)
	paused := filepath.Join(m.sandboxDir(sb.ID), pausedDir)
	for round := 1; round <= snapshot.MaxLayers+1; round++ {
		runCell(t, m, sb.ID, fmt.Sprintf("v%d = %d * 7", round, round), 5*time.Minute)
		start := time.Now()
		if err := m.Pause(ctx, sb.ID); err != nil {
			t.Fatalf("pause %d: %v", round, err)
		}
		took := time.Since(start)
		want := round - 1
		if round == snapshot.MaxLayers+1 {
			want = 0 // flattened
		}
		got := imageChain(paused)
		t.Logf("pause %d: %v, %d files under its memory file, image %d KiB", round, took.Round(time.Millisecond), got, dirUsage(paused)>>10)
		if got != want {
			t.Errorf("pause %d: the image is a layer over %d files, want %d", round, got, want)
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
