package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/tenant"
)

const (
	testDomain = "e2b.test"
	keyAlpha   = "alpha-key-0123456789abcdef"
	keyBeta    = "beta-key-0123456789abcdef0"
)

type rig struct {
	t    *testing.T
	fake *fakeManager
	h    *Handler
	srv  *httptest.Server
	next int // requests Next answered
}

func newRig(t *testing.T) *rig {
	t.Helper()
	toks, err := api.ParseTokens([]byte(keyAlpha + " alpha\n" + keyBeta + " beta\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, fake: newFakeManager()}
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { r.next++; w.WriteHeader(http.StatusTeapot) })
	h, err := NewHandler(tenant.New(r.fake, tenant.Options{}), Options{Domain: testDomain + ":8443", Tokens: toks, Next: next})
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	r.srv = httptest.NewServer(h)
	t.Cleanup(r.srv.Close)
	return r
}

// do sends a request to host with headers, a JSON body (nil: none), and
// decodes a JSON answer into out (nil: none).
func (r *rig) do(method, host, path string, hdr map[string]string, body any, out any) *http.Response {
	r.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			r.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.srv.URL+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Host = host
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := r.srv.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	res.Body = io.NopCloser(bytes.NewReader(b))
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			r.t.Fatalf("%s %s: answer %q: %v", method, path, b, err)
		}
	}
	return res
}

func (r *rig) api(method, path, key string, body, out any) *http.Response {
	r.t.Helper()
	return r.do(method, "api."+testDomain+":8443", path, map[string]string{"X-API-KEY": key}, body, out)
}

func (r *rig) create(key string, body map[string]any) sandboxJSON {
	r.t.Helper()
	var sb sandboxJSON
	if res := r.api("POST", "/v2/sandboxes", key, body, &sb); res.StatusCode != http.StatusCreated {
		r.t.Fatalf("create: %d %s", res.StatusCode, readAll(res))
	}
	return sb
}

func readAll(res *http.Response) string {
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

func wantStatus(t *testing.T, what string, res *http.Response, status int) string {
	t.Helper()
	body := readAll(res)
	if res.StatusCode != status {
		t.Fatalf("%s: status %d, want %d (%s)", what, res.StatusCode, status, body)
	}
	return body
}

// wantE2BError checks an error answer has E2B's shape, so the SDK reads
// its message (res.error.message) and its status-based class.
func wantE2BError(t *testing.T, what string, res *http.Response, status int, contains string) {
	t.Helper()
	body := wantStatus(t, what, res, status)
	var e apiError
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Code != status || e.Message == "" {
		t.Fatalf("%s: body %q is not E2B's {code, message} for %d", what, body, status)
	}
	if !strings.Contains(e.Message, contains) {
		t.Fatalf("%s: message %q does not say %q", what, e.Message, contains)
	}
}

func TestRoutesByHost(t *testing.T) {
	r := newRig(t)
	// A name outside the domain is cellvm's own API's.
	wantStatus(t, "other host", r.do("GET", "cellvm.example:8443", "/v1/sandboxes", nil, nil, nil), http.StatusTeapot)
	if r.next != 1 {
		t.Fatalf("Next answered %d requests, want 1", r.next)
	}
	// A look-alike suffix is not under the domain.
	wantStatus(t, "look-alike", r.do("GET", "api.xe2b.test", "/sandboxes", map[string]string{"X-API-KEY": keyAlpha}, nil, nil), http.StatusTeapot)
	for _, host := range []string{"www.e2b.test", "49983.e2b.test", "049983-sb-fake1.e2b.test", "70000-sb-fake1.e2b.test",
		"49983-sb-fa_ke1.e2b.test:1", "49983-sb-fa.ke1.e2b.test", "49983-xx-fake1.e2b.test", "e2b.test"} {
		wantE2BError(t, host, r.do("GET", host, "/health", map[string]string{"X-Access-Token": "x"}, nil, nil), http.StatusNotFound, "no such host")
	}
	if r.next != 2 {
		t.Fatalf("Next answered %d requests, want 2", r.next)
	}
}

func TestAPIKey(t *testing.T) {
	r := newRig(t)
	wantE2BError(t, "no key", r.do("GET", "api.e2b.test", "/v2/sandboxes", nil, nil, nil), http.StatusUnauthorized, "API key")
	wantE2BError(t, "wrong key", r.api("GET", "/v2/sandboxes", "not-a-key-0123456789", nil, nil), http.StatusUnauthorized, "API key")
	wantStatus(t, "right key", r.api("GET", "/v2/sandboxes", keyAlpha, nil, nil), http.StatusOK)
	// A client failing over and over gets 429 (the SDK's RateLimitError);
	// a right key still works.
	var last *http.Response
	for range failBurst + 2 {
		last = r.api("GET", "/v2/sandboxes", "not-a-key-0123456789", nil, nil)
	}
	wantE2BError(t, "many wrong keys", last, http.StatusTooManyRequests, "too many")
	wantStatus(t, "right key after", r.api("GET", "/v2/sandboxes", keyAlpha, nil, nil), http.StatusOK)
}

func TestCreateGetListKill(t *testing.T) {
	r := newRig(t)
	sb := r.create(keyAlpha, map[string]any{"templateID": "code-interpreter-v1", "timeout": 120,
		"metadata": map[string]string{"run": "42", "user:name": "alice b"}, "envVars": map[string]string{"FOO": "bar"}})
	if sb.SandboxID == "" || sb.EnvdVersion != EnvdVersion || sb.ClientID == "" || sb.TemplateID != "base" {
		t.Fatalf("create answered %+v", sb)
	}
	if !strings.HasPrefix(sb.EnvdAccessToken, envdKind) || !strings.HasPrefix(sb.TrafficAccessToken, trafficKind) {
		t.Fatalf("create's tokens: %q %q", sb.EnvdAccessToken, sb.TrafficAccessToken)
	}
	info, err := r.fake.Manager.Get(t.Context(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	c := info.Config
	if c.Tenant != "alpha" || c.TTL.Seconds() != 120 || c.Labels["user:name"] != "alice b" || c.Env["FOO"] != "bar" ||
		c.Network == nil || !isInternet(c.Network.Allow) || c.Image != "" || c.IdleTimeout != sandbox.Never {
		t.Fatalf("the sandbox's config: %+v", c)
	}
	// No internet asked: no network device.
	off := r.create(keyAlpha, map[string]any{"allow_internet_access": false})
	if i, _ := r.fake.Manager.Get(t.Context(), off.SandboxID); i.Config.Network != nil || i.Config.TTL != defaultTimeout {
		t.Fatalf("allow_internet_access false, no timeout: %+v", i.Config)
	}
	other := r.create(keyBeta, nil)

	var got detailJSON
	wantStatus(t, "get", r.api("GET", "/sandboxes/"+sb.SandboxID, keyAlpha, nil, &got), http.StatusOK)
	if got.SandboxID != sb.SandboxID || got.Metadata["run"] != "42" || got.State != "running" || got.EnvdAccessToken != sb.EnvdAccessToken ||
		!got.AllowInternetAccess || got.CPUCount < 1 || got.MemoryMB < 1 {
		t.Fatalf("get answered %+v", got)
	}

	// The SDK's metadata filter: each key and value encoded, then the
	// whole query string as one parameter.
	inner := url.Values{url.PathEscape("user:name"): {url.PathEscape("alice b")}}.Encode()
	var listed []listedJSON
	wantStatus(t, "list filtered", r.api("GET", "/v2/sandboxes?"+url.Values{"metadata": {inner}, "state": {"running,paused"}}.Encode(), keyAlpha, nil, &listed), http.StatusOK)
	if len(listed) != 1 || listed[0].SandboxID != sb.SandboxID || listed[0].Metadata["run"] != "42" {
		t.Fatalf("list by metadata: %+v", listed)
	}
	wantStatus(t, "list", r.api("GET", "/v2/sandboxes", keyAlpha, nil, &listed), http.StatusOK)
	if len(listed) != 2 {
		t.Fatalf("alpha lists %d sandboxes, want its 2 (not beta's)", len(listed))
	}
	wantStatus(t, "list paused", r.api("GET", "/v2/sandboxes?state=paused", keyAlpha, nil, &listed), http.StatusOK)
	if len(listed) != 0 {
		t.Fatalf("paused: %+v", listed)
	}
	wantE2BError(t, "bad state", r.api("GET", "/v2/sandboxes?state=dead", keyAlpha, nil, nil), http.StatusBadRequest, "state")

	// Another tenant's sandbox is a missing one, whatever the call.
	for _, c := range []struct{ method, path string }{{"GET", ""}, {"DELETE", ""}, {"POST", "/timeout"}, {"POST", "/pause"},
		{"POST", "/connect"}} {
		var body any
		if c.path == "/timeout" {
			body = map[string]int{"timeout": 60}
		}
		wantE2BError(t, "beta "+c.method+c.path, r.api(c.method, "/sandboxes/"+sb.SandboxID+c.path, keyBeta, body, nil), http.StatusNotFound, "not found")
	}
	wantE2BError(t, "alpha gets beta's", r.api("GET", "/sandboxes/"+other.SandboxID, keyAlpha, nil, nil), http.StatusNotFound, "not found")

	wantStatus(t, "kill", r.api("DELETE", "/sandboxes/"+sb.SandboxID, keyAlpha, nil, nil), http.StatusNoContent)
	wantE2BError(t, "get killed", r.api("GET", "/sandboxes/"+sb.SandboxID, keyAlpha, nil, nil), http.StatusNotFound, "not found")
	wantE2BError(t, "kill again", r.api("DELETE", "/sandboxes/"+sb.SandboxID, keyAlpha, nil, nil), http.StatusNotFound, "not found")
	wantE2BError(t, "connect killed", r.api("POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", keyAlpha, map[string]int{"timeout": 10}, nil), http.StatusNotFound, "not found")
	wantE2BError(t, "unknown id", r.api("GET", "/sandboxes/sb-nothere", keyAlpha, nil, nil), http.StatusNotFound, "not found")
}

func TestCreateRefusals(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct {
		name     string
		body     any
		status   int
		contains string
	}{
		{"unknown template", map[string]any{"templateID": "nosuch"}, 400, "one of its images: default, scratch, team"},
		{"zero timeout", map[string]any{"timeout": 0}, 400, "timeout"},
		{"huge timeout", map[string]any{"timeout": 1 << 40}, 400, "timeout"},
		{"bad metadata key", map[string]any{"metadata": map[string]string{"a b": "c"}}, 400, "label key"},
		{"bad env", map[string]any{"envVars": map[string]string{"1X": "c"}}, 400, "env key"},
		{"public traffic", map[string]any{"network": map[string]any{"allowPublicTraffic": true}}, 501, "traffic access token"},
		{"denyOut", map[string]any{"network": map[string]any{"denyOut": []string{"1.1.1.1"}}}, 501, "allowlist"},
		{"autoPause", map[string]any{"autoPause": true}, 501, "pause"},
		{"mcp", map[string]any{"mcp": map[string]any{"x": 1}}, 501, "mcp"},
		{"volumes", map[string]any{"volumeMounts": []any{map[string]string{"name": "v", "path": "/v"}}}, 501, "volumeMounts"},
		{"not json", "{", 400, "JSON"},
		{"too large", map[string]any{"metadata": map[string]string{"k": strings.Repeat("x", maxBody)}}, 413, "bytes"},
	} {
		wantE2BError(t, c.name, r.api("POST", "/sandboxes", keyAlpha, c.body, nil), c.status, c.contains)
	}
	if n := r.fake.Live(); n != 0 {
		t.Fatalf("%d sandboxes left behind by refused creates", n)
	}
	// An image of the daemon's is a template.
	sb := r.create(keyAlpha, map[string]any{"templateID": "team", "network": map[string]any{"allowOut": []string{"pypi.org"}},
		"allow_internet_access": false})
	if i, _ := r.fake.Manager.Get(t.Context(), sb.SandboxID); i.Config.Image != "team" || i.Config.Network == nil || i.Config.Network.Allow[0] != "pypi.org" {
		t.Fatalf("template team, allowOut: %+v", i.Config)
	}
	if sb.TemplateID != "team" {
		t.Fatalf("templateID %q", sb.TemplateID)
	}
}

func TestTimeoutPauseConnect(t *testing.T) {
	r := newRig(t)
	sb := r.create(keyAlpha, map[string]any{"timeout": 60})
	base := "/sandboxes/" + sb.SandboxID
	wantStatus(t, "setTimeout", r.api("POST", base+"/timeout", keyAlpha, map[string]int{"timeout": 3600}, nil), http.StatusNoContent)
	if _, ok := r.fake.ttlOf(sb.SandboxID); !ok {
		t.Fatal("setTimeout did not reach SetTTL")
	}
	wantE2BError(t, "setTimeout 0", r.api("POST", base+"/timeout", keyAlpha, map[string]int{"timeout": 0}, nil), 400, "timeout")
	wantE2BError(t, "setTimeout none", r.api("POST", base+"/timeout", keyAlpha, nil, nil), 400, "timeout")

	var again sandboxJSON
	wantStatus(t, "connect running", r.api("POST", "/v2"+base+"/connect", keyAlpha, map[string]int{"timeout": 60}, &again), http.StatusOK)
	if again.SandboxID != sb.SandboxID || again.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("connect answered %+v, create %+v", again, sb)
	}
	wantE2BError(t, "resume running", r.api("POST", base+"/resume", keyAlpha, nil, nil), http.StatusConflict, "running")
	// A refused pause raises: the SDK reads 409 as "already paused" and
	// would return false.
	r.fake.mu.Lock()
	r.fake.pauseErr = fmt.Errorf("%w: a cell is running", sandbox.ErrBusy)
	r.fake.mu.Unlock()
	wantE2BError(t, "pause refused", r.api("POST", base+"/pause", keyAlpha, map[string]any{}, nil), http.StatusLocked, "cannot be paused now")
	r.fake.mu.Lock()
	r.fake.pauseErr = nil
	r.fake.mu.Unlock()
	wantStatus(t, "pause", r.api("POST", base+"/pause", keyAlpha, map[string]any{}, nil), http.StatusNoContent)
	wantE2BError(t, "pause again", r.api("POST", base+"/pause", keyAlpha, nil, nil), http.StatusConflict, "already paused")
	var d detailJSON
	r.api("GET", base, keyAlpha, nil, &d)
	if d.State != "paused" {
		t.Fatalf("state after pause: %q", d.State)
	}
	wantStatus(t, "connect paused", r.api("POST", "/v2"+base+"/connect", keyAlpha, map[string]int{"timeout": 60}, &again), http.StatusCreated)
	r.api("GET", base, keyAlpha, nil, &d)
	if d.State != "running" {
		t.Fatalf("state after connect: %q", d.State)
	}
	wantStatus(t, "refresh", r.api("POST", base+"/refreshes", keyAlpha, map[string]int{"duration": 30}, nil), http.StatusNoContent)
	wantE2BError(t, "autoPause on connect", r.api("POST", base+"/resume", keyAlpha, map[string]any{"autoPause": true}, nil), 400, "autoPause")
	wantE2BError(t, "unknown op", r.api("POST", base+"/explode", keyAlpha, nil, nil), 404, "not part")
	wantE2BError(t, "wrong method", r.api("GET", base+"/timeout", keyAlpha, nil, nil), 405, "POST")
}

func TestListPages(t *testing.T) {
	r := newRig(t)
	want := map[string]bool{}
	for range 5 {
		want[r.create(keyAlpha, nil).SandboxID] = true
	}
	seen := map[string]bool{}
	next := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		q := "?limit=2"
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		var page []listedJSON
		res := r.api("GET", "/v2/sandboxes"+q, keyAlpha, nil, &page)
		wantStatus(t, "page", res, http.StatusOK)
		for _, s := range page {
			if seen[s.SandboxID] {
				t.Fatalf("%s listed twice", s.SandboxID)
			}
			seen[s.SandboxID] = true
		}
		if next = res.Header.Get("X-Next-Token"); next == "" {
			break
		}
		if len(page) != 2 {
			t.Fatalf("a page before the last has %d", len(page))
		}
	}
	if len(seen) != len(want) {
		t.Fatalf("pages listed %d of %d", len(seen), len(want))
	}
	wantE2BError(t, "bad token", r.api("GET", "/v2/sandboxes?nextToken=zz", keyAlpha, nil, nil), 400, "nextToken")
	wantE2BError(t, "bad limit", r.api("GET", "/v2/sandboxes?limit=0", keyAlpha, nil, nil), 400, "limit")
}

func TestSnapshots(t *testing.T) {
	r := newRig(t)
	sb := r.create(keyAlpha, nil)
	var s snapshotJSON
	wantStatus(t, "snapshot", r.api("POST", "/sandboxes/"+sb.SandboxID+"/snapshots", keyAlpha, map[string]any{}, &s), http.StatusCreated)
	var list []snapshotJSON
	wantStatus(t, "list", r.api("GET", "/snapshots?sandboxID="+sb.SandboxID, keyAlpha, nil, &list), http.StatusOK)
	if len(list) != 1 || list[0].SnapshotID != s.SnapshotID {
		t.Fatalf("snapshots: %+v", list)
	}
	wantStatus(t, "beta lists none", r.api("GET", "/snapshots", keyBeta, nil, &list), http.StatusOK)
	if len(list) != 0 {
		t.Fatalf("beta sees %+v", list)
	}
	fork := r.create(keyAlpha, map[string]any{"templateID": s.SnapshotID})
	if fork.TemplateID != s.SnapshotID {
		t.Fatalf("fork's templateID %q", fork.TemplateID)
	}
	wantE2BError(t, "beta deletes", r.api("DELETE", "/templates/"+s.SnapshotID, keyBeta, nil, nil), 404, "")
	wantStatus(t, "delete", r.api("DELETE", "/templates/"+s.SnapshotID, keyAlpha, nil, nil), http.StatusNoContent)
}
