package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

const (
	alphaToken = "alpha-token-0123456789abcdef"
	betaToken  = "beta-token-0123456789abcdef0"
	envSecret  = "s3cret-env-value-4f1d"
)

// startTenantDaemon runs the fake daemon over TLS with alpha's and beta's
// tokens, MCP, and extra flags.
func startTenantDaemon(t *testing.T, extra ...string) *remoteDaemon {
	t.Helper()
	return startDaemonWithTokens(t, "# two tenants\n"+alphaToken+" alpha\n"+betaToken+" beta\n", extra...)
}

// call sends one request with token and returns the status and body.
func (r *remoteDaemon) call(t *testing.T, token, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.httpClient(t, token).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestTenantsAreIsolated is issue 23's proof over the real TLS listener:
// beta gets exactly a missing object's answer for each of alpha's, on
// every route; workspaces are per tenant; env values never come back.
func TestTenantsAreIsolated(t *testing.T) {
	d := startTenantDaemon(t)
	st, body := d.call(t, alphaToken, "POST", "/v1/sandboxes", `{"env":{"API_KEY":"`+envSecret+`"},"workspace":"data","tenant":"beta"}`)
	if st != http.StatusCreated {
		t.Fatalf("alpha's create: %d %s", st, body)
	}
	var info sandbox.Info
	json.Unmarshal([]byte(body), &info)
	if info.Config.Tenant != "alpha" {
		t.Fatalf("alpha's sandbox is owned by %q", info.Config.Tenant)
	}
	id := info.ID
	if st, body := d.call(t, alphaToken, "POST", "/v1/sandboxes/"+id+"/cells", `{"code":"x = 41"}`); st != http.StatusOK {
		t.Fatalf("alpha's cell: %d %s", st, body)
	}
	if st, body := d.call(t, alphaToken, "PUT", "/v1/sandboxes/"+id+"/files/workspace/notes.txt", "alpha's notes"); st != http.StatusOK {
		t.Fatalf("alpha's upload: %d %s", st, body)
	}
	// A second sandbox of alpha's to snapshot (one with a workspace
	// cannot be).
	st, body = d.call(t, alphaToken, "POST", "/v1/sandboxes", `{}`)
	var plain sandbox.Info
	json.Unmarshal([]byte(body), &plain)
	st, body = d.call(t, alphaToken, "POST", "/v1/sandboxes/"+plain.ID+"/snapshot", "")
	if st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("alpha's snapshot: %d %s", st, body)
	}
	var snap sandbox.SnapshotInfo
	json.Unmarshal([]byte(body), &snap)

	const missing = "sb-fake999"
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/sandboxes/ID", ""},
		{"DELETE", "/v1/sandboxes/ID", ""},
		{"POST", "/v1/sandboxes/ID/cells", `{"code":"print(x)"}`},
		{"POST", "/v1/sandboxes/ID/interrupt", ""},
		{"POST", "/v1/sandboxes/ID/restart", ""},
		{"POST", "/v1/sandboxes/ID/exec", `{"argv":["echo","hi"]}`},
		{"PUT", "/v1/sandboxes/ID/files/workspace/notes.txt", "beta was here"},
		{"GET", "/v1/sandboxes/ID/files/workspace/notes.txt", ""},
		{"PUT", "/v1/sandboxes/ID/network", `{"allow":["pypi.org"]}`},
		{"POST", "/v1/sandboxes/ID/pause", ""},
		{"POST", "/v1/sandboxes/ID/resume", ""},
		{"POST", "/v1/sandboxes/ID/snapshot", ""},
		{"GET", "/v1/sandboxes/ID/logs?tail=10", ""},
	}
	for _, rt := range routes {
		stTheirs, bodyTheirs := d.call(t, betaToken, rt.method, strings.ReplaceAll(rt.path, "ID", id), rt.body)
		stNone, bodyNone := d.call(t, betaToken, rt.method, strings.ReplaceAll(rt.path, "ID", missing), rt.body)
		if stTheirs != http.StatusNotFound {
			t.Errorf("beta %s %s on alpha's sandbox: %d %s, want 404", rt.method, rt.path, stTheirs, bodyTheirs)
		}
		if stTheirs != stNone || strings.ReplaceAll(bodyTheirs, id, "ID") != strings.ReplaceAll(bodyNone, missing, "ID") {
			t.Errorf("beta can tell alpha's sandbox from a missing one on %s %s: %d %s vs %d %s", rt.method, rt.path, stTheirs, bodyTheirs, stNone, bodyNone)
		}
	}
	// Snapshots: beta can neither get, list, fork nor delete alpha's.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/snapshots/" + snap.ID, ""},
		{"DELETE", "/v1/snapshots/" + snap.ID, ""},
		{"POST", "/v1/sandboxes", `{"snapshot":"` + snap.ID + `"}`},
	} {
		if st, body := d.call(t, betaToken, c.method, c.path, c.body); st != http.StatusNotFound {
			t.Errorf("beta %s %s on alpha's snapshot: %d %s", c.method, c.path, st, body)
		}
	}
	for path, theirs := range map[string]string{"/v1/sandboxes": id, "/v1/snapshots": snap.ID, "/v1/workspaces": `"data"`} {
		if st, body := d.call(t, betaToken, "GET", path, ""); st != http.StatusOK || strings.Contains(body, theirs) {
			t.Errorf("beta's list %s shows alpha's (%s): %d %s", path, theirs, st, body)
		}
	}
	// Beta's data workspace is another volume: it mounts while alpha holds
	// alpha's, and does not hold alpha's file.
	st, body = d.call(t, betaToken, "POST", "/v1/sandboxes", `{"workspace":"data"}`)
	if st != http.StatusCreated {
		t.Fatalf("beta's create with its data workspace: %d %s", st, body)
	}
	var bInfo sandbox.Info
	json.Unmarshal([]byte(body), &bInfo)
	if st, body := d.call(t, betaToken, "GET", "/v1/sandboxes/"+bInfo.ID+"/files/workspace/notes.txt", ""); st != http.StatusNotFound {
		t.Errorf("beta reads a notes.txt in its data workspace: %d %s", st, body)
	}
	// Alpha's sandbox still answers with its state.
	if st, body := d.call(t, alphaToken, "POST", "/v1/sandboxes/"+id+"/cells", `{"code":"print(x)"}`); st != http.StatusOK || !strings.Contains(body, "41") {
		t.Errorf("alpha's variables after beta's attempts: %d %s", st, body)
	}
	if st, body := d.call(t, alphaToken, "GET", "/v1/sandboxes/"+id+"/files/workspace/notes.txt", ""); st != http.StatusOK || body != "alpha's notes" {
		t.Errorf("alpha's file after beta's attempts: %d %q", st, body)
	}
	// The operator (the socket) sees both tenants' sandboxes.
	if r := d.cellvm(t, "sandbox", "ls", "--json"); !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, bInfo.ID) {
		t.Errorf("the operator's list lacks a tenant's sandbox: %s", r.stdout)
	}
	// Env values never come back: not in get, list, events or the log.
	for _, path := range []string{"/v1/sandboxes/" + id, "/v1/sandboxes"} {
		if _, body := d.call(t, alphaToken, "GET", path, ""); strings.Contains(body, envSecret) || !strings.Contains(body, "API_KEY") {
			t.Errorf("%s: the env value came back, or its name did not: %s", path, body)
		}
	}
	if r := d.cellvm(t, "sandbox", "inspect", id, "--json"); strings.Contains(r.stdout, envSecret) {
		t.Errorf("the operator's inspect shows the env value: %s", r.stdout)
	}
	if strings.Contains(d.log.String(), envSecret) {
		t.Errorf("the env value reached the daemon's log")
	}
}

// TestOperatorActsForATenant: the socket's ?tenant= makes objects that
// tenant's, and an unknown tenant is refused.
func TestOperatorActsForATenant(t *testing.T) {
	d := startTenantDaemon(t)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://cellvm"+path, strings.NewReader(body))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, body := do("POST", "/v1/sandboxes?tenant=beta", `{}`)
	if st != http.StatusCreated || !strings.Contains(body, `"tenant":"beta"`) {
		t.Fatalf("the operator's create for beta: %d %s", st, body)
	}
	if _, body := d.call(t, betaToken, "GET", "/v1/sandboxes", ""); !strings.Contains(body, `"tenant":"beta"`) {
		t.Errorf("beta does not see the sandbox the operator made for it: %s", body)
	}
	if st, body := do("POST", "/v1/sandboxes?tenant=gamma", `{}`); st != http.StatusBadRequest || !strings.Contains(body, "unknown tenant") {
		t.Errorf("an unknown tenant: %d %s", st, body)
	}
	if st, body := d.call(t, alphaToken, "GET", "/v1/sandboxes?tenant=beta", ""); st != http.StatusForbidden {
		t.Errorf("a token naming another tenant: %d %s", st, body)
	}
}

// TestTenantQuotas: one past each cap is refused with 429, Retry-After
// and the cap's name, with nothing made.
func TestTenantQuotas(t *testing.T) {
	d := startTenantDaemon(t, "--tenant-max-sandboxes", "2", "--tenant-max-vcpus", "3", "--tenant-max-memory-mib", "1536", "--tenant-creates-per-minute", "0")
	create := func(token, body string) (int, string) { return d.call(t, token, "POST", "/v1/sandboxes", body) }
	count := func(token string) int {
		_, body := d.call(t, token, "GET", "/v1/sandboxes", "")
		return strings.Count(body, `"id":`)
	}
	for _, c := range []struct {
		name, first, second, cap string
	}{
		{"vcpus", `{"vcpus":2}`, `{"vcpus":2}`, "max_vcpus"},
		{"memory", `{"memory_mib":1024}`, `{"memory_mib":1024}`, "max_memory_mib"},
		{"sandboxes", `{}`, `{}`, "max_sandboxes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Start empty.
			for _, token := range []string{alphaToken, betaToken} {
				_, body := d.call(t, token, "GET", "/v1/sandboxes", "")
				for _, m := range regexp.MustCompile(`"id":"(sb-[^"]+)"`).FindAllStringSubmatch(body, -1) {
					d.call(t, token, "DELETE", "/v1/sandboxes/"+m[1], "")
				}
			}
			if st, body := create(alphaToken, c.first); st != http.StatusCreated {
				t.Fatalf("first: %d %s", st, body)
			}
			if c.name == "sandboxes" {
				if st, body := create(alphaToken, c.first); st != http.StatusCreated {
					t.Fatalf("second: %d %s", st, body)
				}
			}
			before := count(alphaToken)
			st, body := create(alphaToken, c.second)
			if st != http.StatusTooManyRequests || !strings.Contains(body, c.cap) || !strings.Contains(body, `"code":"quota"`) {
				t.Fatalf("one past %s: %d %s", c.cap, st, body)
			}
			if n := count(alphaToken); n != before {
				t.Errorf("a refused create made something: %d sandboxes, were %d", n, before)
			}
			if st, body := create(betaToken, c.second); st != http.StatusCreated {
				t.Errorf("beta is held by alpha's use: %d %s", st, body)
			}
		})
	}
	// Retry-After comes with the 429.
	req, _ := http.NewRequest("POST", d.url+"/v1/sandboxes", strings.NewReader(`{}`))
	resp, err := d.httpClient(t, alphaToken).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestMCPSessionsBelongToTheirToken: another token's use of a session id
// is 404, and a foreign Origin is 403.
func TestMCPSessionsBelongToTheirToken(t *testing.T) {
	d := startTenantDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "cellvm-test", Version: "0"}, nil)
	var sid string
	hc := d.httpClient(t, alphaToken)
	hc.Transport = sessionSpy{next: hc.Transport, sid: &sid}
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + api.MCPPath, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer cs.Close()
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "x = 7"}}); err != nil || r.IsError {
		t.Fatalf("alpha's tool call: %v %+v", err, r)
	}
	if sid == "" {
		t.Fatal("no session id seen")
	}
	list := `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`
	send := func(token, session, origin string) (int, string) {
		req, _ := http.NewRequest("POST", d.url+api.MCPPath, strings.NewReader(list))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := d.httpClient(t, token).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	stBeta, bodyBeta := send(betaToken, sid, "")
	stNone, bodyNone := send(betaToken, "not-a-session-id-at-all", "")
	if stBeta != http.StatusNotFound || stNone != http.StatusNotFound || bodyBeta != bodyNone {
		t.Errorf("beta with alpha's session id: %d %q; with an unknown one: %d %q", stBeta, bodyBeta, stNone, bodyNone)
	}
	if st, body := send(alphaToken, sid, ""); st != http.StatusOK {
		t.Errorf("alpha with its own session id: %d %s", st, body)
	}
	if st, body := send(alphaToken, sid, "https://evil.example"); st != http.StatusForbidden {
		t.Errorf("a foreign Origin: %d %s", st, body)
	}
	// Alpha's sandbox is alpha's, and beta cannot see it.
	if _, body := d.call(t, betaToken, "GET", "/v1/sandboxes", ""); strings.Contains(body, `"id":"sb-`) {
		t.Errorf("beta sees the MCP session's sandbox: %s", body)
	}
}

// sessionSpy notes the session id a server hands out.
type sessionSpy struct {
	next http.RoundTripper
	sid  *string
}

func (s sessionSpy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(r)
	if err == nil {
		if v := resp.Header.Get("Mcp-Session-Id"); v != "" {
			*s.sid = v
		}
	}
	return resp, err
}

// TestOperatorsEgressRulesBindTenants: a tenant's allowlist naming a
// denied range is refused at create and at policy update, and the
// operator's --egress-allow-private opens one for everyone.
func TestOperatorsEgressRulesBindTenants(t *testing.T) {
	d := startTenantDaemon(t, "--egress-allow-private", "10.20.0.0/16")
	st, body := d.call(t, alphaToken, "POST", "/v1/sandboxes", `{"network":{"allow":["8.8.8.8"]}}`)
	if st != http.StatusCreated {
		t.Fatalf("a public allow: %d %s", st, body)
	}
	var info sandbox.Info
	json.Unmarshal([]byte(body), &info)
	for _, allow := range []string{`["169.254.169.254"]`, `["10.0.0.0/8"]`, `["192.168.1.1"]`, `["100.100.100.200"]`, `["0.0.0.0/0","169.254.169.254/32"]`} {
		before := strings.Count(func() string { _, b := d.call(t, alphaToken, "GET", "/v1/sandboxes", ""); return b }(), `"id":`)
		if st, body := d.call(t, alphaToken, "POST", "/v1/sandboxes", `{"network":{"allow":`+allow+`}}`); st != http.StatusBadRequest || !strings.Contains(body, "denied") {
			t.Errorf("create with %s: %d %s, want 400 naming the rule", allow, st, body)
		}
		if after := strings.Count(func() string { _, b := d.call(t, alphaToken, "GET", "/v1/sandboxes", ""); return b }(), `"id":`); after != before {
			t.Errorf("a refused create with %s made a sandbox", allow)
		}
		if st, body := d.call(t, alphaToken, "PUT", "/v1/sandboxes/"+info.ID+"/network", `{"allow":`+allow+`}`); st != http.StatusBadRequest || !strings.Contains(body, "denied") {
			t.Errorf("policy update to %s: %d %s, want 400", allow, st, body)
		}
	}
	if _, body := d.call(t, alphaToken, "GET", "/v1/sandboxes/"+info.ID, ""); !strings.Contains(body, `"allow":["8.8.8.8"]`) {
		t.Errorf("a refused update changed the policy: %s", body)
	}
	// The operator's --egress-allow-private range is open to all tenants.
	for _, token := range []string{alphaToken, betaToken} {
		if st, body := d.call(t, token, "POST", "/v1/sandboxes", `{"network":{"allow":["10.20.1.5"]}}`); st != http.StatusCreated {
			t.Errorf("an --egress-allow-private range: %d %s", st, body)
		}
	}
	// 0.0.0.0/0 alone passes: the denied ranges stay closed inside it.
	if st, body := d.call(t, betaToken, "POST", "/v1/sandboxes", `{"network":{"allow":["0.0.0.0/0"]}}`); st != http.StatusCreated {
		t.Errorf("0.0.0.0/0: %d %s", st, body)
	}
}

// TestAuditLogOfATenantSession: a scripted session over TLS appears in
// the audit log in order, as JSON lines, with the code by its sha256,
// each record under its tenant, and no token or env value anywhere.
func TestAuditLogOfATenantSession(t *testing.T) {
	d := startTenantDaemon(t)
	logPath := filepath.Join(d.dir, "state", "audit.jsonl")
	code := "x = 6 * 7"
	sum := sha256.Sum256([]byte(code))
	codeHash := hex.EncodeToString(sum[:])

	must := func(token, method, path, body string, want int) string {
		t.Helper()
		st, b := d.call(t, token, method, path, body)
		if st != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, st, b, want)
		}
		return b
	}
	var info sandbox.Info
	json.Unmarshal([]byte(must(alphaToken, "POST", "/v1/sandboxes", `{"env":{"API_KEY":"`+envSecret+`"},"network":{"allow":["pypi.org"]}}`, 201)), &info)
	id := info.ID
	must(alphaToken, "POST", "/v1/sandboxes/"+id+"/cells", `{"code":"`+code+`"}`, 200)
	must(alphaToken, "POST", "/v1/sandboxes/"+id+"/exec", `{"argv":["echo","hi"]}`, 200)
	must(alphaToken, "PUT", "/v1/sandboxes/"+id+"/files/tmp/data.txt", "payload", 200)
	must(alphaToken, "GET", "/v1/sandboxes/"+id+"/files/tmp/data.txt", "", 200)
	must(alphaToken, "PUT", "/v1/sandboxes/"+id+"/network", `{"allow":["pypi.org","files.pythonhosted.org"]}`, 204)
	var snap sandbox.SnapshotInfo
	json.Unmarshal([]byte(must(alphaToken, "POST", "/v1/sandboxes/"+id+"/snapshot", "", 201)), &snap)
	var fork sandbox.Info
	json.Unmarshal([]byte(must(alphaToken, "POST", "/v1/sandboxes", `{"snapshot":"`+snap.ID+`"}`, 201)), &fork)
	must(betaToken, "POST", "/v1/sandboxes/"+id+"/cells", `{"code":"print(x)"}`, 404)
	must(betaToken, "DELETE", "/v1/sandboxes/"+id, "", 404)
	must(alphaToken, "DELETE", "/v1/sandboxes/"+fork.ID, "", 204)
	must(alphaToken, "DELETE", "/v1/sandboxes/"+id, "", 204)

	raw, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), alphaToken) || strings.Contains(string(raw), betaToken) || strings.Contains(string(raw), envSecret) {
		t.Fatalf("a token or an env value is in the audit log:\n%s", raw)
	}
	type step struct{ tenant, action, sandbox string }
	var got []step
	var recs []map[string]any
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d is not JSON: %v: %s", i+1, err, line)
		}
		if rec["action"] == "sandbox.end" {
			continue // the end records come from the event stream, in their own time
		}
		recs = append(recs, rec)
		sb, _ := rec["sandbox"].(string)
		got = append(got, step{fmt.Sprint(rec["tenant"]), fmt.Sprint(rec["action"]), sb})
	}
	want := []step{
		{"alpha", "POST /v1/sandboxes", id},
		{"alpha", "POST /v1/sandboxes/{id}/cells", id},
		{"alpha", "POST /v1/sandboxes/{id}/exec", id},
		{"alpha", "PUT /v1/sandboxes/{id}/files/{path...}", id},
		{"alpha", "GET /v1/sandboxes/{id}/files/{path...}", id},
		{"alpha", "PUT /v1/sandboxes/{id}/network", id},
		{"alpha", "POST /v1/sandboxes/{id}/snapshot", id},
		{"alpha", "POST /v1/sandboxes", fork.ID},
		{"beta", "POST /v1/sandboxes/{id}/cells", id},
		{"beta", "DELETE /v1/sandboxes/{id}", id},
		{"alpha", "DELETE /v1/sandboxes/{id}", fork.ID},
		{"alpha", "DELETE /v1/sandboxes/{id}", id},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the audit log's records:\n%v\nwant:\n%v\n%s", got, want, raw)
	}
	if recs[1]["code_sha256"] != codeHash || recs[1]["code"] != nil {
		t.Errorf("the cell's record: %v; want code_sha256 %s and no code", recs[1], codeHash)
	}
	if recs[3]["sha256"] == nil || recs[3]["size"] != float64(len("payload")) || recs[4]["sha256"] != recs[3]["sha256"] {
		t.Errorf("the file records: %v / %v", recs[3], recs[4])
	}
	if p, _ := recs[5]["policy"].(map[string]any); fmt.Sprint(p["old_allow"]) != "[pypi.org]" || fmt.Sprint(p["new_allow"]) != "[pypi.org files.pythonhosted.org]" {
		t.Errorf("the policy record: %v", recs[5])
	}
	if recs[6]["snapshot"] != snap.ID || recs[7]["snapshot"] != snap.ID {
		t.Errorf("the snapshot and fork records: %v / %v", recs[6], recs[7])
	}
	for _, i := range []int{8, 9} {
		if recs[i]["status"] != float64(404) || recs[i]["token_id"] == recs[0]["token_id"] {
			t.Errorf("beta's refused attempt: %v", recs[i])
		}
	}
	// The CLI reads it, filtered by tenant.
	r := d.cellvm(t, "audit", "--file", logPath, "--tenant", "beta", "--json")
	if r.code != 0 || strings.Count(strings.TrimSpace(r.stdout), "\n") != 1 || strings.Contains(r.stdout, `"tenant":"alpha"`) {
		t.Errorf("cellvm audit --tenant beta: %+v", r)
	}
}

// TestBadTenantFilesStopTheStart: a malformed token file or tenant config
// is a usage error at start that names the file and what is wrong (never
// the token), and no socket is left.
func TestBadTenantFilesStopTheStart(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	os.WriteFile(tokens, []byte(alphaToken+" alpha\n"+betaToken+" Beta\n"), 0o600)
	conf := filepath.Join(dir, "tenants.json")
	os.WriteFile(conf, []byte(`{"tenants": {"alpha": {"max_sandboxs": 2}}}`), 0o600)
	good := filepath.Join(dir, "good-tokens")
	os.WriteFile(good, []byte(alphaToken+" alpha\n"), 0o600)
	sock := filepath.Join(dir, "cellvm.sock")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "tcp://127.0.0.1:0", "--token-file", tokens}, "line 2"},
		{[]string{"--listen", "tcp://127.0.0.1:0", "--token-file", good, "--tenant-config", conf}, "max_sandboxs"},
		{[]string{"--tenant-max-vcpus", "-1"}, "max_vcpus"},
	} {
		var out, errb strings.Builder
		args := append([]string{"serve", "--socket", sock, "--state-dir", filepath.Join(dir, "state"), "--network=false"}, c.args...)
		code := run(args, strings.NewReader(""), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), betaToken) {
			t.Errorf("serve %v: exit %d, stderr %q; want exit %d naming %q", c.args, code, errb.String(), exitUsage, c.want)
		}
		if _, err := os.Stat(sock); err == nil {
			t.Errorf("serve %v left its socket", c.args)
		}
	}
}

// TestCLITenantFlag: on the socket, --tenant makes the operator's
// commands act for that tenant.
func TestCLITenantFlag(t *testing.T) {
	d := startTenantDaemon(t)
	r := d.cellvm(t, "sandbox", "create", "--tenant", "beta")
	if r.code != 0 {
		t.Fatalf("create --tenant beta: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	if _, body := d.call(t, betaToken, "GET", "/v1/sandboxes/"+id, ""); !strings.Contains(body, `"tenant":"beta"`) {
		t.Errorf("beta's view of the sandbox made for it: %s", body)
	}
	if r := d.cellvm(t, "sandbox", "ls", "--tenant", "alpha"); strings.Contains(r.stdout, id) {
		t.Errorf("ls --tenant alpha shows beta's sandbox: %+v", r)
	}
	if r := d.cellvm(t, "sandbox", "ls", "--tenant", "gamma"); r.code == 0 || !strings.Contains(r.stderr+r.stdout, "unknown tenant") {
		t.Errorf("ls --tenant gamma: %+v", r)
	}
}

// TestMCPSessionsPerTenantAreCapped: past --mcp-max-sessions a tenant's
// new session is refused (429), another tenant's is not, and ending one
// frees its place.
func TestMCPSessionsPerTenantAreCapped(t *testing.T) {
	d := startTenantDaemon(t, "--mcp-max-sessions", "1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	connect := func(token string) (*mcp.ClientSession, error) {
		client := mcp.NewClient(&mcp.Implementation{Name: "cellvm-test", Version: "0"}, nil)
		return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + api.MCPPath, HTTPClient: d.httpClient(t, token), MaxRetries: -1}, nil)
	}
	first, err := connect(alphaToken)
	if err != nil {
		t.Fatalf("alpha's first session: %v", err)
	}
	if cs, err := connect(alphaToken); err == nil || !strings.Contains(err.Error(), "429") && !strings.Contains(err.Error(), "Too Many") && !strings.Contains(err.Error(), "MCP sessions") {
		if cs != nil {
			cs.Close()
		}
		t.Fatalf("alpha's second session past the cap: %v", err)
	}
	other, err := connect(betaToken)
	if err != nil {
		t.Fatalf("beta is held by alpha's sessions: %v", err)
	}
	other.Close()
	first.Close() // its DELETE frees the place
	again, err := connect(alphaToken)
	if err != nil {
		t.Fatalf("alpha's session after the first ended: %v", err)
	}
	again.Close()
}
