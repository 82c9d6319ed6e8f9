package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The router test runs deploy/router/nginx.conf, as shipped but for the
// addresses, ports and paths an operator fills in, under Debian's nginx in
// front of two `cellvm serve --node` daemons (the test binary over the
// fake manager: real flags, TLS listeners and token checks), all on
// loopback ports of the host's own namespace.

// routerNode is one daemon behind the router.
type routerNode struct {
	*fakeDaemon
	name, addr string
}

func startRouterNode(t *testing.T, name, tokenFile string, extra ...string) *routerNode {
	t.Helper()
	d := startFakeDaemon(t, append([]string{"--listen", "tcp://127.0.0.1:0", "--token-file", tokenFile, "--node", name}, extra...)...)
	m := regexp.MustCompile(`listening over TLS" addr=(\S+)`).FindStringSubmatch(d.log.String())
	if m == nil {
		t.Fatalf("%s: no TLS listener in the log:\n%s", name, d.log.String())
	}
	return &routerNode{fakeDaemon: d, name: name, addr: m[1]}
}

// apiRequest is one "api request" line of a daemon's log.
type apiRequest struct{ method, path, status, sandbox string }

var apiRequestLine = regexp.MustCompile(`msg="api request" method=(\S+) path=("(?:[^"\\]|\\.)*"|\S+) status=(\d+)(?:.* sandbox=(\S+))?`)

// served lists the requests the daemon answered, in order.
func (n *routerNode) served() []apiRequest {
	var out []apiRequest
	for _, line := range strings.Split(n.log.String(), "\n") {
		if m := apiRequestLine.FindStringSubmatch(line); m != nil {
			if p, err := strconv.Unquote(m[2]); err == nil {
				m[2] = p
			}
			out = append(out, apiRequest{m[1], m[2], m[3], m[4]})
		}
	}
	return out
}

// count counts the requests answered with method, path and status ("" for
// any status).
func (n *routerNode) count(method, path, status string) int {
	c := 0
	for _, r := range n.served() {
		if r.method == method && r.path == path && (status == "" || r.status == status) {
			c++
		}
	}
	return c
}

// about lists the requests about sandbox id the daemon answered.
func (n *routerNode) about(id string) []apiRequest {
	var out []apiRequest
	for _, r := range n.served() {
		if r.sandbox == id {
			out = append(out, r)
		}
	}
	return out
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// nginxBinary finds Debian's nginx (in /usr/sbin, which a user's PATH may
// lack).
func nginxBinary() string {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	return ""
}

// freeLoopbackPort returns a TCP port free on 127.0.0.1 a moment ago.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeRouterCert writes a self-signed certificate for 127.0.0.1 and its
// key, as an operator puts the router's in /etc/cellvm/tls.
func writeRouterCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cellvm router (test)"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// renderRouterConfig fills the shipped configuration in for the test, as an
// operator does: each placeholder must occur exactly as often as said, so
// a change to the shipped file fails here rather than going untested.
func renderRouterConfig(t *testing.T, shipped string, subs [][3]string) string {
	t.Helper()
	out := shipped
	for _, s := range subs {
		if got, want := strings.Count(out, s[0]), s[2]; fmt.Sprint(got) != want {
			t.Fatalf("deploy/router/nginx.conf: %q occurs %d times, the test expects %s", s[0], got, want)
		}
		out = strings.ReplaceAll(out, s[0], s[1])
	}
	return out
}

type router struct {
	url    string
	client *http.Client // with the token
	anon   *http.Client // without
}

// startRouter runs nginx on the rendered configuration: `nginx -t` first,
// then nginx in the foreground (one process, no daemon), killed at the
// end. Its temporary files, pid and logs stay in a test directory.
func startRouter(t *testing.T, nginx string, a, b *routerNode, token string) *router {
	t.Helper()
	dir := t.TempDir()
	shipped, err := os.ReadFile("../../deploy/router/nginx.conf")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, pool := writeRouterCert(t, dir)
	port, gate := freeLoopbackPort(t), freeLoopbackPort(t)
	temps := "http {\n"
	for _, d := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		os.Mkdir(filepath.Join(dir, d), 0o700)
		temps += fmt.Sprintf("    %s_temp_path %s;\n", d, filepath.Join(dir, d))
	}
	temps += fmt.Sprintf("    access_log %s;\n", filepath.Join(dir, "access.log"))
	conf := renderRouterConfig(t, string(shipped), [][3]string{
		{"10.0.0.11:8443", a.addr, "2"},
		{"10.0.0.12:8443", b.addr, "2"},
		{"listen 8443 ssl;", fmt.Sprintf("listen 127.0.0.1:%d ssl;", port), "1"},
		{"127.0.0.1:8442", fmt.Sprintf("127.0.0.1:%d", gate), "2"},
		{"/etc/cellvm/tls/tls.crt", certFile, "1"},
		{"/etc/cellvm/tls/tls.key", keyFile, "1"},
		{"http {\n", temps, "1"},
	})
	confFile := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	global := fmt.Sprintf("daemon off; master_process off; pid %s; error_log stderr notice;", filepath.Join(dir, "nginx.pid"))
	args := []string{"-p", dir, "-c", confFile, "-g", global}

	out, err := exec.Command(nginx, append([]string{"-t"}, args...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "test is successful") {
		t.Fatalf("nginx -t on deploy/router/nginx.conf (rendered in %s): %v\n%s", confFile, err, out)
	}

	log := &lockedBuffer{}
	cmd := exec.Command(nginx, args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("nginx log:\n%s", log.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("nginx exited:\n%s", log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen on %s:\n%s", addr, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	tr := func() *http.Transport { return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}} }
	return &router{url: "https://" + addr,
		client: &http.Client{Transport: bearer{token, tr()}, Timeout: 30 * time.Second},
		anon:   &http.Client{Transport: tr(), Timeout: 30 * time.Second}}
}

// call sends one request through the router and returns the status and
// body.
func (r *router) call(t *testing.T, c *http.Client, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, r.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// want sends a request with the token and fails unless the status is
// status; it returns the body.
func (r *router) want(t *testing.T, status int, method, path, body string) string {
	t.Helper()
	got, b := r.call(t, r.client, method, path, body)
	if got != status {
		t.Fatalf("%s %s through the router: %d %s, want %d", method, path, got, b, status)
	}
	return b
}

// errorOf decodes an API error body.
func errorOf(t *testing.T, body string) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" {
		t.Fatalf("not an API error: %q (%v)", body, err)
	}
	return e.Error.Code, e.Error.Message
}

func idOf(t *testing.T, body string) string {
	t.Helper()
	var v struct{ ID string }
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.ID == "" {
		t.Fatalf("no id in %q (%v)", body, err)
	}
	return v.ID
}

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
