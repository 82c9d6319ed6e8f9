package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/cellvm/cellvm/sandbox"
)

// TestWorkspacesThroughClient: GET /v1/workspaces lists what the manager
// has (an empty array when none), DELETE /v1/workspaces/{name} removes one
// (204), and the manager's refusals reach the caller as their codes: a
// held one 409, a missing one 404, a bad name 400. A create's workspace
// reaches the manager.
func TestWorkspacesThroughClient(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	status, _, body := e.do(t, "GET", "/v1/workspaces", nil)
	if status != http.StatusOK || string(body) != "[]\n" && string(body) != "[]" {
		t.Fatalf("GET /v1/workspaces with none: %d %q, want 200 []", status, body)
	}
	// The manager's workspaces: "free" with a file of 4096 bytes and no
	// holder, "held" held by a sandbox.
	free, err := e.fake.Create(ctx, sandbox.Config{Workspace: "free"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.fake.Upload(ctx, free.ID, "/workspace/data", bytes.NewReader(make([]byte, 4096))); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.Delete(ctx, free.ID); err != nil {
		t.Fatal(err)
	}
	holder, err := e.fake.Create(ctx, sandbox.Config{Workspace: "held"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := e.fake.Workspaces(ctx)
	list, err := e.client.Workspaces(ctx)
	if err != nil || len(list) != 2 || list[1].Name != "held" || list[1].Sandbox != holder.ID || list[0].DiskBytes != 4096 ||
		list[0].CreatedAt.IsZero() || !list[0].CreatedAt.Equal(want[0].CreatedAt) {
		t.Fatalf("Workspaces = %+v, %v; the manager has %+v", list, err, want)
	}
	_, _, body = e.do(t, "GET", "/v1/workspaces", nil)
	var raw []map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || raw[0]["size_bytes"] != float64(2<<30) || raw[1]["sandbox"] != holder.ID {
		t.Errorf("the wire form: %s (%v)", body, err)
	}
	if err := e.client.DeleteWorkspace(ctx, "held"); !errors.Is(err, sandbox.ErrBusy) {
		t.Errorf("delete of a held workspace: %v, want ErrBusy", err)
	}
	wantClientError(t, "delete held", e.client.DeleteWorkspace(ctx, "held"), http.StatusConflict, CodeBusy)
	if err := e.client.DeleteWorkspace(ctx, "free"); err != nil {
		t.Errorf("delete of a free workspace: %v", err)
	}
	wantClientError(t, "delete again", e.client.DeleteWorkspace(ctx, "free"), http.StatusNotFound, CodeNotFound)
	wantClientError(t, "delete a bad name", e.client.DeleteWorkspace(ctx, "Bad Name"), http.StatusBadRequest, CodeInvalid)
	info, err := e.client.Create(ctx, sandbox.Config{Workspace: "notes"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.fake.Get(ctx, info.ID); got.Config.Workspace != "notes" {
		t.Errorf("the manager got a create with workspace %q, want notes", got.Config.Workspace)
	}
}

// TestImagesThroughClient: GET /v1/images gives the manager's images
// (the fake's "default", "scratch" and "team"), and a create's image
// reaches the manager.
func TestImagesThroughClient(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	imgs, err := e.client.Images(ctx)
	if err != nil || len(imgs) != 3 || imgs[0].Name != sandbox.DefaultImage || imgs[2].Name != "team" || imgs[2].Python != "3.11.2" || imgs[2].SizeBytes != 1006<<20 {
		t.Fatalf("Images = %+v, %v", imgs, err)
	}
	info, err := e.client.Create(ctx, sandbox.Config{Image: "team"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.fake.Get(ctx, info.ID); got.Config.Image != "team" {
		t.Errorf("the manager got a create with image %q, want team", got.Config.Image)
	}
	if err := e.client.DeleteImage(ctx, "scratch"); err != nil {
		t.Errorf("DeleteImage scratch: %v", err)
	}
	wantClientError(t, "delete a used image", e.client.DeleteImage(ctx, "team"), http.StatusConflict, CodeBusy)
	wantClientError(t, "delete the default image", e.client.DeleteImage(ctx, sandbox.DefaultImage), http.StatusBadRequest, CodeInvalid)
	wantClientError(t, "delete a missing image", e.client.DeleteImage(ctx, "nope"), http.StatusNotFound, CodeNotFound)
	if calls := e.fake.Calls(); !slices.Contains(calls, "DeleteImage scratch") {
		t.Errorf("the manager was not asked to delete image scratch: %v", calls)
	}
}
