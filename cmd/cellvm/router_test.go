package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRouterInFrontOfTwoDaemons: deploy/router/nginx.conf under nginx in
// front of two daemons (routerharness_test.go): where each call goes,
// the retry of a full node's create, and what the router refuses.
func TestRouterInFrontOfTwoDaemons(t *testing.T) {
	nginx := nginxBinary()
	if nginx == "" {
		t.Skip("nginx is not installed (Debian: apt-get install nginx; make setup installs it): the router test runs deploy/router/nginx.conf under it")
	}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokenFile, []byte(remoteToken+"\n"), 0o600)
	nodes := map[string]*routerNode{
		"kvm-a": startRouterNode(t, "kvm-a", tokenFile),
		// kvm-b holds one sandbox at most: the full node.
		"kvm-b": startRouterNode(t, "kvm-b", tokenFile, "--max-sandboxes", "1"),
	}
	a, b := nodes["kvm-a"], nodes["kvm-b"]
	r := startRouter(t, nginx, a, b, remoteToken)
	idRE := regexp.MustCompile(`^sb-(kvm-a|kvm-b)-[0-9a-f]{12}$`)
	nodeOf := func(id string) *routerNode {
		t.Helper()
		m := idRE.FindStringSubmatch(id)
		if m == nil {
			t.Fatalf("sandbox id %q does not name kvm-a or kvm-b", id)
		}
		return nodes[m[1]]
	}
	other := func(n *routerNode) *routerNode {
		if n == a {
			return b
		}
		return a
	}

	// The router passes the token through and the daemon checks it (the
	// router has no token of its own: the 401 is the daemon's).
	if got, body := r.call(t, r.anon, "GET", "/v1/sandboxes/sb-kvm-a-000000000001", ""); got != http.StatusUnauthorized {
		t.Errorf("without a token: %d %s, want kvm-a's 401", got, body)
	} else if code, _ := errorOf(t, body); code != "unauthorized" {
		t.Errorf("without a token: %s", body)
	}
	r.want(t, http.StatusNotFound, "GET", "/v1/sandboxes/sb-kvm-a-000000000001", "")
	waitFor(t, "kvm-a to log the call with the token", func() bool {
		return a.count("GET", "/v1/sandboxes/sb-kvm-a-000000000001", "404") == 1
	})

	// Creates land on a node, whose name the id carries, and spread over
	// both while both have room.
	landed := map[*routerNode]int{}
	for i := 0; i < 4; i++ {
		id := idOf(t, r.want(t, http.StatusCreated, "POST", "/v1/sandboxes", `{"env":{"N":"1"}}`))
		n := nodeOf(id)
		landed[n]++
		r.want(t, http.StatusOK, "GET", "/nodes/"+n.name+"/v1/sandboxes/"+id, "")
		if got, _ := r.call(t, r.client, "GET", "/nodes/"+other(n).name+"/v1/sandboxes/"+id, ""); got != http.StatusNotFound {
			t.Errorf("%s: the other node answers %d, want 404", id, got)
		}
		r.want(t, http.StatusNoContent, "DELETE", "/v1/sandboxes/"+id, "")
	}
	if landed[a] == 0 || landed[b] == 0 {
		t.Errorf("4 creates through the router landed %d on kvm-a and %d on kvm-b; least_conn should use both", landed[a], landed[b])
	}

	// A full node's create is retried on the other. kvm-b is made full
	// directly; every create through the router then lands on kvm-a,
	// and kvm-b answered 503 to those it got first.
	idB := idOf(t, r.want(t, http.StatusCreated, "POST", "/nodes/kvm-b/v1/sandboxes", `{}`))
	if nodeOf(idB) != b {
		t.Fatalf("a create at /nodes/kvm-b made %s", idB)
	}
	waitFor(t, "kvm-b to log its create", func() bool { return b.count("POST", "/v1/sandboxes", "201") == landed[b]+1 })
	full503 := b.count("POST", "/v1/sandboxes", "503")
	var onA []string
	for i := 0; i < 4; i++ {
		id := idOf(t, r.want(t, http.StatusCreated, "POST", "/v1/sandboxes", `{}`))
		if nodeOf(id) != a {
			t.Fatalf("with kvm-b full, a create made %s", id)
		}
		onA = append(onA, id)
	}
	waitFor(t, "kvm-a to log the creates", func() bool { return a.count("POST", "/v1/sandboxes", "201") == landed[a]+len(onA) })
	if n := b.count("POST", "/v1/sandboxes", "503") - full503; n == 0 {
		t.Errorf("full kvm-b was never tried (no 503 in its log): the retry is unproven")
	} else {
		t.Logf("full kvm-b answered 503 to %d of 4 creates; the router retried them on kvm-a", n)
	}
	idA := onA[0]

	// Every call about a sandbox reaches its node, and only its node.
	for _, id := range []string{idA, idB} {
		n := nodeOf(id)
		base := "/v1/sandboxes/" + id
		type step struct {
			status             int
			method, path, body string
			contains           string
		}
		steps := []step{
			{200, "GET", base, "", `"id":"` + id + `"`},
			{200, "POST", base + "/cells", `{"code":"x = 41"}`, `"status":"ok"`},
			{200, "POST", base + "/cells", `{"code":"print(x)"}`, `41`},
			{200, "POST", base + "/cells?stream=1", `{"code":"print(x)"}`, `"type":"end"`},
			{200, "POST", base + "/exec", `{"argv":["echo","on",` + fmt.Sprintf("%q", n.name) + `]}`, "on " + n.name},
			{200, "PUT", base + "/files/tmp/a%20b.txt", "hello " + n.name, `"bytes":11`},
			{200, "GET", base + "/files/tmp/a%20b.txt", "", "hello " + n.name},
			{204, "PUT", base + "/network", `{"allow":["pypi.org"]}`, ""},
			{204, "POST", base + "/interrupt", "", ""},
			{204, "POST", base + "/pause", "", ""},
			{204, "POST", base + "/resume", "", ""},
			{200, "GET", base + "/logs", "", ""},
			{201, "POST", base + "/snapshot", "", `"sandbox_id":"` + id + `"`},
		}
		for _, s := range steps {
			body := r.want(t, s.status, s.method, s.path, s.body)
			if !strings.Contains(body, s.contains) {
				t.Errorf("%s %s: %q lacks %q", s.method, s.path, body, s.contains)
			}
		}
		// The daemon logs a request just after answering it.
		var got []apiRequest
		waitFor(t, fmt.Sprintf("%s to log %d calls about %s", n.name, len(steps), id), func() bool {
			got = n.about(id)
			return len(got) >= len(steps)
		})
		if len(got) != len(steps) {
			t.Errorf("%s: its node %s answered %d requests for %d calls: %v", id, n.name, len(got), len(steps), got)
		}
		for i, s := range steps {
			if i >= len(got) {
				break
			}
			path, _, _ := strings.Cut(s.path, "?")
			path = strings.ReplaceAll(path, "%20", " ")
			if got[i].method != s.method || got[i].path != path || got[i].status != fmt.Sprint(s.status) {
				t.Errorf("%s: call %d reached %s as %+v, want %s %s %d", id, i, n.name, got[i], s.method, path, s.status)
			}
		}
		if strings.Contains(other(n).log.String(), id) {
			t.Errorf("a call about %s reached the other node %s", id, other(n).name)
		}
	}

	// A snapshot is on its sandbox's node and its id does not name it:
	// the router refuses it at /v1/snapshots and reaches it per node.
	snap := idOf(t, r.want(t, http.StatusCreated, "POST", "/v1/sandboxes/"+idA+"/snapshot", ""))
	for _, path := range []string{"/v1/snapshots/" + snap, "/v1/snapshots", "/v1/workspaces", "/v1/images", "/v1/images/team"} {
		if code, msg := errorOf(t, r.want(t, http.StatusNotImplemented, "GET", path, "")); code != "not_supported" || !strings.Contains(msg, "/nodes/NODE/v1/") {
			t.Errorf("GET %s: %s %q, want not_supported naming /nodes/NODE/v1/...", path, code, msg)
		}
	}
	if code, msg := errorOf(t, r.want(t, http.StatusNotImplemented, "DELETE", "/v1/snapshots/"+snap, "")); code != "not_supported" || !strings.Contains(msg, "snapshots live on one node") {
		t.Errorf("DELETE /v1/snapshots/%s: %s %q", snap, code, msg)
	}
	r.want(t, http.StatusOK, "GET", "/nodes/kvm-a/v1/snapshots/"+snap, "")
	if got, _ := r.call(t, r.client, "GET", "/nodes/kvm-b/v1/snapshots/"+snap, ""); got != http.StatusNotFound {
		t.Errorf("kvm-b has kvm-a's snapshot: %d", got)
	}
	r.want(t, http.StatusOK, "GET", "/nodes/kvm-a/v1/images", "")
	r.want(t, http.StatusOK, "GET", "/nodes/kvm-b/v1/workspaces", "")

	// A create that names a snapshot, a workspace or an image is refused
	// at /v1/sandboxes, reaching no daemon; at /nodes/NODE it is made.
	createsA, createsB := a.count("POST", "/v1/sandboxes", ""), b.count("POST", "/v1/sandboxes", "")
	for _, c := range []struct{ body, what string }{
		{`{"snapshot":"` + snap + `"}`, "snapshot"},
		{`{"vcpus":1, "Workspace" : "data"}`, "workspace"},
		{`{"image":"team"}`, "image"},
	} {
		if code, msg := errorOf(t, r.want(t, http.StatusBadRequest, "POST", "/v1/sandboxes", c.body)); code != "invalid" ||
			!strings.Contains(msg, "names a "+c.what) || !strings.Contains(msg, "/nodes/NODE/v1/sandboxes") {
			t.Errorf("create %s: %s %q", c.body, code, msg)
		}
	}
	if a.count("POST", "/v1/sandboxes", "") != createsA || b.count("POST", "/v1/sandboxes", "") != createsB {
		t.Errorf("a refused create reached a daemon")
	}
	fork := idOf(t, r.want(t, http.StatusCreated, "POST", "/nodes/kvm-a/v1/sandboxes", `{"snapshot":"`+snap+`"}`))
	if nodeOf(fork) != a || !strings.Contains(r.want(t, http.StatusOK, "POST", "/v1/sandboxes/"+fork+"/cells", `{"code":"print(x)"}`), "41") {
		t.Errorf("the fork %s of %s at /nodes/kvm-a does not hold x = 41", fork, snap)
	}

	// The list is per node: the router says so, and each node lists its own.
	if code, msg := errorOf(t, r.want(t, http.StatusNotImplemented, "GET", "/v1/sandboxes", "")); code != "not_supported" || !strings.Contains(msg, "GET /nodes/NODE/v1/sandboxes") {
		t.Errorf("list through the router: %s %q", code, msg)
	}
	for _, n := range []*routerNode{a, b} {
		var list struct{ Sandboxes []struct{ ID string } }
		json.Unmarshal([]byte(r.want(t, http.StatusOK, "GET", "/nodes/"+n.name+"/v1/sandboxes", "")), &list)
		if len(list.Sandboxes) == 0 {
			t.Errorf("%s lists nothing", n.name)
		}
		for _, s := range list.Sandboxes {
			if nodeOf(s.ID) != n {
				t.Errorf("%s lists %s", n.name, s.ID)
			}
		}
	}
	// Per-daemon routes, and what the router refuses.
	r.want(t, http.StatusOK, "GET", "/nodes/kvm-b/v1/capacity", "")
	r.want(t, http.StatusOK, "GET", "/nodes/kvm-a/metrics", "")
	for _, c := range []struct {
		status       int
		path, substr string
	}{
		{404, "/v1/sandboxes/sb-kvm-z-000000000001", "no daemon for node kvm-z"},
		{404, "/nodes/kvm-z/v1/capacity", "no daemon for node kvm-z"},
		{404, "/v1/sandboxes/sb-0123456789ab", "names no node"},
		{501, "/v1/capacity", "/nodes/NODE/"},
		{501, "/v1/events", "/nodes/NODE/"},
	} {
		if _, msg := errorOf(t, r.want(t, c.status, "GET", c.path, "")); !strings.Contains(msg, c.substr) {
			t.Errorf("GET %s: %q lacks %q", c.path, msg, c.substr)
		}
	}

	// Delete through the router, from its node.
	for _, id := range []string{idA, idB, fork} {
		r.want(t, http.StatusNoContent, "DELETE", "/v1/sandboxes/"+id, "")
		if got, _ := r.call(t, r.client, "GET", "/v1/sandboxes/"+id, ""); got != http.StatusNotFound {
			t.Errorf("%s after delete: %d", id, got)
		}
		waitFor(t, id+"'s delete to reach "+nodeOf(id).name, func() bool { return nodeOf(id).count("DELETE", "/v1/sandboxes/"+id, "204") == 1 })
	}
}

// TestRouterStreamsCells: a cell's NDJSON lines come through the router as
// they happen (proxy_buffering off), not when the cell ends.
func TestRouterStreamsCells(t *testing.T) {
	nginx := nginxBinary()
	if nginx == "" {
		t.Skip("nginx is not installed (Debian: apt-get install nginx; make setup installs it)")
	}
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokenFile, []byte(remoteToken+"\n"), 0o600)
	a, b := startRouterNode(t, "kvm-a", tokenFile), startRouterNode(t, "kvm-b", tokenFile)
	r := startRouter(t, nginx, a, b, remoteToken)
	id := idOf(t, r.want(t, http.StatusCreated, "POST", "/nodes/kvm-b/v1/sandboxes", `{}`))
	req, _ := http.NewRequest("POST", r.url+"/v1/sandboxes/"+id+"/cells?stream=1", strings.NewReader(`{"code":"`+cellStream+`"}`))
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || !strings.Contains(lines.Text(), "tick 1") {
		t.Fatalf("first streamed line: %q (%v)", lines.Text(), lines.Err())
	}
	// Only now may the cell finish.
	os.WriteFile(b.release, nil, 0o644)
	var rest strings.Builder
	for lines.Scan() {
		rest.WriteString(lines.Text() + "\n")
	}
	if !strings.Contains(rest.String(), "tick 2") || !strings.Contains(rest.String(), `"type":"end"`) {
		t.Errorf("the rest of the stream: %s", rest.String())
	}
}
