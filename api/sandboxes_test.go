package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
)

func sandboxConfigForTest() sandbox.Config {
	return sandbox.Config{
		VCPUs: 2, MemoryMiB: 1024,
		Env:         map[string]string{"MODE": "test", "_X1": ""},
		TTL:         time.Hour,
		IdleTimeout: 10 * time.Minute,
		Network:     &sandbox.NetworkPolicy{Allow: []string{"pypi.org", "10.0.0.0/8"}},
	}
}

func TestSandboxLifecycleThroughClient(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()

	want := sandboxConfigForTest()
	info, err := e.client.Create(ctx, want)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if info.ID == "" || info.State != sandbox.StateRunning {
		t.Fatalf("Create returned %+v", info)
	}
	// Env values are write-only: the answer names them only.
	wantBack := want
	wantBack.Env = nil
	if !reflect.DeepEqual(info.Config, wantBack) {
		t.Errorf("config round trip: got %+v, want %+v", info.Config, wantBack)
	}
	if !reflect.DeepEqual(info.EnvNames, []string{"MODE", "_X1"}) {
		t.Errorf("env names: got %v, want [MODE _X1]", info.EnvNames)
	}
	id := info.ID

	list, err := e.client.List(ctx)
	if err != nil || len(list) != 1 || list[0].ID != id {
		t.Fatalf("List = %+v, %v; want one sandbox %s", list, err, id)
	}
	got, err := e.client.Get(ctx, id)
	if err != nil || got.ID != id || !got.CreatedAt.Equal(info.CreatedAt) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	for _, step := range []struct {
		name string
		call func() error
	}{
		{"Pause", func() error { return e.client.Pause(ctx, id) }},
		{"Resume", func() error { return e.client.Resume(ctx, id) }},
		{"Interrupt", func() error { return e.client.Interrupt(ctx, id) }},
		{"Restart", func() error { return e.client.Restart(ctx, id, sandbox.Session{}) }},
	} {
		if err := step.call(); err != nil {
			t.Errorf("%s: %v", step.name, err)
		}
	}
	snap, err := e.client.Snapshot(ctx, id)
	if kept, _ := e.fake.GetSnapshot(ctx, snap.ID); err != nil || snap.SandboxID != id || snap.SizeBytes == 0 || !reflect.DeepEqual(snap, kept) {
		t.Errorf("Snapshot = %+v, %v; the manager has %+v", snap, err, kept)
	}
	pol := sandbox.NetworkPolicy{Allow: []string{"*.github.com", "1.1.1.1"}}
	if err := e.client.SetNetwork(ctx, id, pol); err != nil {
		t.Errorf("SetNetwork: %v", err)
	}
	if got, err := e.fake.Get(ctx, id); err != nil || got.Config.Network == nil || !reflect.DeepEqual(*got.Config.Network, pol) {
		t.Errorf("manager got policy %+v (%v), want %+v", got.Config.Network, err, pol)
	}
	if err := e.client.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = e.client.Get(ctx, id)
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	wantClientError(t, "Get after Delete", err, http.StatusNotFound, CodeNotFound)

	calls := e.fake.Calls()
	for _, c := range []string{"Create", "List", "Get " + id, "Pause " + id, "Resume " + id, "Interrupt " + id,
		"Restart " + id, "Snapshot " + id, "SetNetwork " + id, "Delete " + id} {
		if !slices.Contains(calls, c) {
			t.Errorf("manager never saw %q; calls %q", c, calls)
		}
	}
}

func TestUnknownSandboxEveryRoute(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	const id = "nope"
	calls := map[string]func() error{
		"Get":    func() error { _, err := e.client.Get(ctx, id); return err },
		"Delete": func() error { return e.client.Delete(ctx, id) },
		"RunCell": func() error {
			_, err := e.client.RunCell(ctx, id, sandbox.Cell{Code: "1", Timeout: 0}, nil)
			return err
		},
		"RunCell/ND": func() error {
			_, err := e.client.RunCell(ctx, id, sandbox.Cell{Code: "1", Timeout: 0}, func(cell.Event) {})
			return err
		},
		"Interrupt": func() error { return e.client.Interrupt(ctx, id) },
		"Restart":   func() error { return e.client.Restart(ctx, id, sandbox.Session{}) },
		"Exec": func() error {
			_, err := e.client.Exec(ctx, id, sandbox.ExecRequest{Argv: []string{"true"}})
			return err
		},
		"Upload":     func() error { _, err := e.client.Upload(ctx, id, "/workspace/a", strings.NewReader("x")); return err },
		"Download":   func() error { _, err := e.client.Download(ctx, id, "/workspace/a", &strings.Builder{}); return err },
		"SetNetwork": func() error { return e.client.SetNetwork(ctx, id, sandbox.NetworkPolicy{}) },
		"Pause":      func() error { return e.client.Pause(ctx, id) },
		"Resume":     func() error { return e.client.Resume(ctx, id) },
		"Snapshot":   func() error { _, err := e.client.Snapshot(ctx, id); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", name, err)
			continue
		}
		wantClientError(t, name, err, http.StatusNotFound, CodeNotFound)
	}
}

func TestCreateEmptyBodyMeansDefaults(t *testing.T) {
	e := newTestEnv(t)
	status, hdr, body := e.do(t, "POST", "/v1/sandboxes", nil)
	if status != http.StatusCreated {
		t.Fatalf("status %d: %s", status, body)
	}
	var info sandbox.Info
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatal(err)
	}
	if info.Config.VCPUs != sandbox.DefaultVCPUs || info.Config.MemoryMiB != sandbox.DefaultMemoryMiB {
		t.Errorf("config %+v, want defaults", info.Config)
	}
	if hdr.Get("Location") != "/v1/sandboxes/"+info.ID {
		t.Errorf("Location %q", hdr.Get("Location"))
	}
}

func TestCreateRejectsInvalidConfigWithoutCallingManager(t *testing.T) {
	e := newTestEnv(t)
	cases := []struct {
		name, body, mention string
	}{
		{"too much memory", `{"memory_mib": 70000}`, "memory_mib"},
		{"too little memory", `{"memory_mib": 32}`, "memory_mib"},
		{"too many vcpus", `{"vcpus": 33}`, "vcpus"},
		{"negative vcpus", `{"vcpus": -1}`, "vcpus"},
		{"bad env key", `{"env": {"1BAD": "x"}}`, "env key"},
		{"env key with =", `{"env": {"A=B": "x"}}`, "env key"},
		{"negative ttl", `{"ttl_s": -1}`, "ttl_s"},
		{"huge ttl", `{"ttl_s": 99999999999999}`, "ttl_s"},
		{"negative idle", `{"idle_timeout_s": -5}`, "idle_timeout_s"},
		{"bad allow entry", `{"network": {"allow": ["not a host!"]}}`, "allow[0]"},
		{"bad cidr", `{"network": {"allow": ["10.0.0.0/99"]}}`, "allow[0]"},
	}
	for _, c := range cases {
		status, _, body := e.do(t, "POST", "/v1/sandboxes", jsonBody(c.body))
		apiErr := wantAPIError(t, c.name, status, body, http.StatusBadRequest, CodeInvalid)
		if apiErr != nil && !strings.Contains(apiErr.Message, c.mention) {
			t.Errorf("%s: message %q does not mention %q", c.name, apiErr.Message, c.mention)
		}
	}
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("manager was called for invalid configs: %q", calls)
	}
	// The same through the client: a typed error that is ErrInvalid.
	_, err := e.client.Create(context.Background(), sandbox.Config{MemoryMiB: 1 << 20})
	if !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("client Create with too much memory: %v, want ErrInvalid", err)
	}
}

func TestBadJSONBodies(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	cases := []struct{ name, method, path, body string }{
		{"malformed", "POST", "/v1/sandboxes", `{"vcpus": `},
		{"unknown field", "POST", "/v1/sandboxes", `{"memory_mb": 512}`},
		{"unknown nested field", "POST", "/v1/sandboxes", `{"network": {"allow": [], "deny": []}}`},
		{"wrong type", "POST", "/v1/sandboxes", `{"vcpus": "two"}`},
		{"fractional seconds", "POST", "/v1/sandboxes", `{"ttl_s": 1.5}`},
		{"trailing data", "POST", "/v1/sandboxes", `{"vcpus": 1} {"vcpus": 2}`},
		{"array", "POST", "/v1/sandboxes", `[1,2]`},
		{"cell unknown field", "POST", "/v1/sandboxes/" + id + "/cells", `{"code": "1", "timeout": 5}`},
		{"cell empty body", "POST", "/v1/sandboxes/" + id + "/cells", ``},
		{"exec unknown field", "POST", "/v1/sandboxes/" + id + "/exec", `{"argv": ["ls"], "shell": true}`},
		{"exec bad base64", "POST", "/v1/sandboxes/" + id + "/exec", `{"argv": ["cat"], "stdin_base64": "!!"}`},
		{"exec both stdins", "POST", "/v1/sandboxes/" + id + "/exec", `{"argv": ["cat"], "stdin": "a", "stdin_base64": "YQ=="}`},
		{"network unknown field", "PUT", "/v1/sandboxes/" + id + "/network", `{"allowed": ["a.com"]}`},
		{"network empty", "PUT", "/v1/sandboxes/" + id + "/network", ``},
	}
	for _, c := range cases {
		status, _, body := e.do(t, c.method, c.path, jsonBody(c.body))
		wantAPIError(t, c.name, status, body, http.StatusBadRequest, CodeInvalid)
	}
	if calls := e.fake.Calls(); !slices.Equal(calls, []string{"Create"}) {
		t.Errorf("manager saw %q, want only the setup Create", calls)
	}
}

func TestOversizedJSONBody(t *testing.T) {
	e := newTestEnv(t, WithMaxJSONBytes(4096))
	big := `{"env": {"A": "` + strings.Repeat("x", 8192) + `"}}`
	// With a Content-Length...
	status, _, body := e.do(t, "POST", "/v1/sandboxes", strings.NewReader(big))
	wantAPIError(t, "declared length", status, body, http.StatusRequestEntityTooLarge, CodeTooLarge)
	// ...and chunked, where the limit is found while reading.
	status, _, body = e.do(t, "POST", "/v1/sandboxes", struct{ *strings.Reader }{strings.NewReader(big)})
	wantAPIError(t, "chunked", status, body, http.StatusRequestEntityTooLarge, CodeTooLarge)
	if calls := e.fake.Calls(); len(calls) != 0 {
		t.Errorf("manager called: %q", calls)
	}
}

func TestFullIs503WithRetryAfter(t *testing.T) {
	e := newTestEnv(t)
	e.fake.Fail("Create", fmt.Errorf("%w: 8 sandboxes running", sandbox.ErrFull))
	status, hdr, body := e.do(t, "POST", "/v1/sandboxes", jsonBody(`{}`))
	wantAPIError(t, "full", status, body, http.StatusServiceUnavailable, CodeFull)
	if hdr.Get("Retry-After") == "" {
		t.Error("no Retry-After on 503 full")
	}
	_, err := e.client.Create(context.Background(), sandbox.Config{})
	if !errors.Is(err, sandbox.ErrFull) {
		t.Errorf("client: %v, want ErrFull", err)
	}
}

func TestErrorMapping(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	cases := []struct {
		err      error
		status   int
		code     string
		sentinel error
	}{
		{fmt.Errorf("%w: paused", sandbox.ErrBusy), 409, CodeBusy, sandbox.ErrBusy},
		{fmt.Errorf("%w: vm died", sandbox.ErrLost), 410, CodeLost, sandbox.ErrLost},
		{fmt.Errorf("%w: no snapshots here", sandbox.ErrNotSupported), 501, CodeNotSupported, sandbox.ErrNotSupported},
		{fmt.Errorf("%w: bad", sandbox.ErrInvalid), 400, CodeInvalid, sandbox.ErrInvalid},
		{fmt.Errorf("%w: disk", sandbox.ErrTooLarge), 413, CodeTooLarge, sandbox.ErrTooLarge},
		{fmt.Errorf("%w: cap", sandbox.ErrFull), 503, CodeFull, sandbox.ErrFull},
		{errors.New("kaboom"), 500, CodeInternal, nil},
	}
	for _, c := range cases {
		e.fake.Fail("Pause", c.err)
		err := e.client.Pause(context.Background(), id)
		apiErr := wantClientError(t, c.code, err, c.status, c.code)
		if c.sentinel != nil && !errors.Is(err, c.sentinel) {
			t.Errorf("%s: errors.Is(%v, %v) false", c.code, err, c.sentinel)
		}
		if !strings.Contains(apiErr.Message, c.err.Error()) {
			t.Errorf("%s: message %q lost the manager's detail %q", c.code, apiErr.Message, c.err)
		}
		// An error matches only its own sentinel.
		for _, other := range []error{sandbox.ErrNotFound, sandbox.ErrBusy, sandbox.ErrLost, sandbox.ErrFull} {
			if other != c.sentinel && errors.Is(err, other) {
				t.Errorf("%s: also matches %v", c.code, other)
			}
		}
	}
}

func TestUnknownRouteAndMethodAreJSON(t *testing.T) {
	e := newTestEnv(t)
	status, _, body := e.do(t, "GET", "/v1/nope", nil)
	wantAPIError(t, "unknown route", status, body, http.StatusNotFound, CodeNotFound)
	status, hdr, body := e.do(t, "PATCH", "/v1/sandboxes", nil)
	wantAPIError(t, "wrong method", status, body, http.StatusMethodNotAllowed, CodeInvalid)
	if allow := hdr.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Errorf("Allow %q, want GET and POST", allow)
	}
	status, _, body = e.do(t, "GET", "/v1/sandboxes/", nil)
	wantAPIError(t, "empty id", status, body, http.StatusNotFound, CodeNotFound)
}

func TestRequestLog(t *testing.T) {
	e := newTestEnv(t)
	id := mustCreate(t, e)
	if _, err := e.client.Get(context.Background(), "missing"); err == nil {
		t.Fatal("Get missing succeeded")
	}
	var sawGet, sawCreate bool
	for _, line := range strings.Split(strings.TrimSpace(e.log.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if _, ok := rec["duration_ms"].(float64); !ok {
			t.Errorf("no duration_ms in %s", line)
		}
		if rec["method"] == "POST" && rec["path"] == "/v1/sandboxes" && rec["status"] == float64(201) {
			sawCreate = true
		}
		if rec["method"] == "GET" && rec["path"] == "/v1/sandboxes/missing" && rec["status"] == float64(404) &&
			rec["sandbox"] == "missing" && rec["error"] == CodeNotFound {
			sawGet = true
		}
		if _, ok := rec["peer_uid"]; !ok {
			t.Errorf("no peer_uid in %s", line)
		}
	}
	if !sawCreate || !sawGet {
		t.Errorf("log lacks the create (%v) or the failed get (%v) record (sandbox %s):\n%s", sawCreate, sawGet, id, e.log.String())
	}
}
