package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

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
	made := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	e.fake.mu.Lock()
	e.fake.workspaces = []sandbox.WorkspaceInfo{
		{Name: "held", SizeBytes: 2 << 30, DiskBytes: 1 << 20, CreatedAt: made, Sandbox: "sb-0123456789abcdef"},
		{Name: "free", SizeBytes: 2 << 30, DiskBytes: 4096, CreatedAt: made},
	}
	e.fake.mu.Unlock()
	list, err := e.client.Workspaces(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "held" || list[0].Sandbox != "sb-0123456789abcdef" || list[1].DiskBytes != 4096 || !list[1].CreatedAt.Equal(made) {
		t.Fatalf("Workspaces = %+v, %v", list, err)
	}
	_, _, body = e.do(t, "GET", "/v1/workspaces", nil)
	var raw []map[string]any
	if err := json.Unmarshal(body, &raw); err != nil || raw[1]["size_bytes"] != float64(2<<30) || raw[0]["sandbox"] != "sb-0123456789abcdef" {
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
	if _, err := e.client.Create(ctx, sandbox.Config{Workspace: "notes"}); err != nil {
		t.Fatal(err)
	}
	e.fake.mu.Lock()
	got := e.fake.lastCreate.Workspace
	e.fake.mu.Unlock()
	if got != "notes" {
		t.Errorf("the manager got a create with workspace %q, want notes", got)
	}
}

// TestImagesThroughClient: GET /v1/images gives the manager's images, and
// a create's image reaches the manager.
func TestImagesThroughClient(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	imgs, err := e.client.Images(ctx)
	if err != nil || len(imgs) != 2 || imgs[0].Name != sandbox.DefaultImage || imgs[1].Name != "extra" || imgs[1].Python != "3.11.2" || imgs[1].SizeBytes != 2<<30 {
		t.Fatalf("Images = %+v, %v", imgs, err)
	}
	if _, err := e.client.Create(ctx, sandbox.Config{Image: "extra"}); err != nil {
		t.Fatal(err)
	}
	e.fake.mu.Lock()
	got := e.fake.lastCreate.Image
	e.fake.mu.Unlock()
	if got != "extra" {
		t.Errorf("the manager got a create with image %q, want extra", got)
	}
	if err := e.client.DeleteImage(ctx, "old"); err != nil {
		t.Errorf("DeleteImage old: %v", err)
	}
	wantClientError(t, "delete a used image", e.client.DeleteImage(ctx, "extra"), http.StatusConflict, CodeBusy)
	wantClientError(t, "delete the default image", e.client.DeleteImage(ctx, sandbox.DefaultImage), http.StatusBadRequest, CodeInvalid)
	wantClientError(t, "delete a missing image", e.client.DeleteImage(ctx, "nope"), http.StatusNotFound, CodeNotFound)
	e.fake.mu.Lock()
	defer e.fake.mu.Unlock()
	if !slices.Contains(e.fake.calls, "DeleteImage old") {
		t.Errorf("the manager was not asked to delete image old: %v", e.fake.calls)
	}
}
