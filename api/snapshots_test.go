package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestSnapshotsThroughClient: POST snapshot answers 201 with the snapshot,
// GET /v1/snapshots lists it, GET and DELETE /v1/snapshots/{id} find and
// remove it, and a create with {"snapshot": id} reaches the manager with
// the machine left to the snapshot.
func TestSnapshotsThroughClient(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	// Not the defaults' machine, which a fork given the defaults by the
	// API would not match (the manager refuses such a fork).
	info, err := e.client.Create(ctx, sandbox.Config{VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	status, _, body := e.do(t, "POST", "/v1/sandboxes/"+info.ID+"/snapshot", nil)
	var snap sandbox.SnapshotInfo
	if status != http.StatusCreated || json.Unmarshal(body, &snap) != nil || !sandbox.ValidSnapshotID(snap.ID) || snap.SandboxID != info.ID {
		t.Fatalf("POST snapshot: %d %s", status, body)
	}
	list, err := e.client.ListSnapshots(ctx)
	if err != nil || len(list) != 1 || list[0] != snap {
		t.Fatalf("ListSnapshots = %+v, %v", list, err)
	}
	if got, err := e.client.GetSnapshot(ctx, snap.ID); err != nil || got != snap {
		t.Fatalf("GetSnapshot = %+v, %v", got, err)
	}
	// A fork that does not give its machine gets the snapshot's from the
	// manager, not the API's defaults (which the snapshot's shape refuses).
	fork, err := e.client.Create(ctx, sandbox.Config{Snapshot: snap.ID})
	if err != nil {
		t.Fatalf("fork without vcpus and memory: %v", err)
	}
	forked, err := e.fake.Get(ctx, fork.ID)
	if err != nil || forked.Config.Snapshot != snap.ID {
		t.Errorf("the manager got a create from snapshot %q (%v), want %q", forked.Config.Snapshot, err, snap.ID)
	}
	if forked.Config.VCPUs != 2 || forked.Config.MemoryMiB != 1024 {
		t.Errorf("the fork has %d vCPUs and %d MiB, want the snapshot's 2 and 1024", forked.Config.VCPUs, forked.Config.MemoryMiB)
	}
	if err := e.client.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.GetSnapshot(ctx, snap.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("GetSnapshot after delete: %v", err)
	}
	if err := e.client.DeleteSnapshot(ctx, snap.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	} else {
		wantClientError(t, "DeleteSnapshot", err, http.StatusNotFound, CodeNotFound)
	}
	status, _, body = e.do(t, "GET", "/v1/snapshots", nil)
	if status != http.StatusOK || string(body) != "[]\n" && string(body) != "[]" {
		t.Errorf("empty list: %d %q", status, body)
	}
	status, _, body = e.do(t, "POST", "/v1/sandboxes", strings.NewReader(`{"snapshot": "../../etc"}`))
	if status != http.StatusBadRequest {
		t.Errorf("create from a malformed snapshot id: %d %s", status, body)
	}
}
