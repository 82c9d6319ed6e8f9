package main

import (
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
