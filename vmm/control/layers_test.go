package control

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/vmm/snapshot"
)

// A restore of a chain needs a slot per layer, base first, and no more
// layers than a chain may have.
func TestRestoreLayerSlots(t *testing.T) {
	s := Spec{Restore: &Restore{Layers: 2}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{"restore.layer.0", "restore.layer.1", SlotRestoreMemory, SlotRestoreState}
	if got := s.Slots(); !reflect.DeepEqual(got, want) {
		t.Errorf("slots %q, want %q", got, want)
	}
	for _, n := range []int{-1, snapshot.MaxCheckpointChain} {
		s := Spec{Restore: &Restore{Layers: n}}
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "layers") {
			t.Errorf("%d layers: %v, want a refusal", n, err)
		}
	}
	files := Files{SlotRestoreState: os.Stdin, SlotRestoreMemory: os.Stdin, LayerSlot(0): os.Stdin}
	if err := s.CheckFiles(files); err == nil || !strings.Contains(err.Error(), "restore.layer.1") {
		t.Errorf("a chain with a layer's file missing: %v", err)
	}
}

// SnapshotLayer says so in its request, and Snapshot does not.
func TestSnapshotLayerRequest(t *testing.T) {
	var got []bool
	sock := serve(t, func(_, _ *os.File, req Request) error {
		got = append(got, req.Layer)
		return nil
	})
	state, memory := files(t)
	if err := Snapshot(ctx(t), sock, state, memory, ThenResume); err != nil {
		t.Fatal(err)
	}
	if err := SnapshotLayer(ctx(t), sock, state, memory, ThenResume); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []bool{false, true}) {
		t.Errorf("the handler saw layer=%v, want [false true]", got)
	}
}
