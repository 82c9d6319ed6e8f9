package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
)

const remoteToken = "remote-token-0123456789abcdef"

type remoteDaemon struct {
	*fakeDaemon
	url, cert, tokenFile string
}

// startRemoteDaemon runs the fake daemon with a TLS listener on a loopback
// port, tokens, and MCP over HTTP, and extra flags.
func startRemoteDaemon(t *testing.T, extra ...string) *remoteDaemon {
	t.Helper()
	return startDaemonWithTokens(t, "# test\n"+remoteToken+"\n", extra...)
}

// startDaemonWithTokens is startRemoteDaemon with the token file's text.
func startDaemonWithTokens(t *testing.T, tokens string, extra ...string) *remoteDaemon {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(tokenFile, []byte(tokens), 0o600)
	d := startFakeDaemon(t, append([]string{"--listen", "tcp://127.0.0.1:0", "--token-file", tokenFile, "--mcp", "--mcp-idle-timeout", "10m"}, extra...)...)
	m := regexp.MustCompile(`listening over TLS" addr=(\S+) cert=(\S+)`).FindStringSubmatch(d.log.String())
	if m == nil {
		t.Fatalf("no TLS listener in the log:\n%s", d.log.String())
	}
	return &remoteDaemon{fakeDaemon: d, url: "https://" + m[1], cert: m[2], tokenFile: tokenFile}
}

// httpClient trusts the daemon's self-signed certificate and sends token
// (if any) with every request.
func (r *remoteDaemon) httpClient(t *testing.T, token string) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(r.cert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Transport: bearer{token, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

func TestServeOverTLSWithTokens(t *testing.T) {
	d := startRemoteDaemon(t)
	for _, c := range []struct {
		token string
		want  int
	}{{"", http.StatusUnauthorized}, {"not-the-token-0123456789", http.StatusUnauthorized}, {remoteToken, http.StatusOK}} {
		resp, err := d.httpClient(t, c.token).Get(d.url + "/v1/sandboxes")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("token %q: %d %s, want %d", c.token, resp.StatusCode, body, c.want)
		}
		if c.want == http.StatusUnauthorized && !strings.Contains(string(body), `"code":"unauthorized"`) {
			t.Errorf("401 body %s", body)
		}
	}
	// The CLI with --url, --token-file and --tls-ca.
	remote := []string{"--url", d.url, "--token-file", d.tokenFile, "--tls-ca", d.cert}
	r := cellvmEnv(t, nil, "", append([]string{"sandbox", "create"}, remote...)...)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "sb-") {
		t.Fatalf("create over TLS: %+v", r)
	}
	id := strings.TrimSpace(r.stdout)
	if r := cellvmEnv(t, nil, "", append([]string{"cell", id, "-c", "print(x)"}, remote...)...); r.code != exitError || !strings.Contains(r.stderr, "NameError") {
		t.Errorf("cell over TLS: %+v", r)
	}
	if r := cellvmEnv(t, []string{"CELLVM_URL=" + d.url, "CELLVM_TOKEN=" + remoteToken, "CELLVM_TLS_CA=" + d.cert}, "", "sandbox", "ls"); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Errorf("ls with the environment: %+v", r)
	}
	if r := cellvmEnv(t, []string{"CELLVM_TOKEN=wrong-token-0123456789"}, "", "sandbox", "ls", "--url", d.url, "--tls-ca", d.cert, "--json"); r.code != exitError || !strings.Contains(r.stdout, `"code":"unauthorized"`) {
		t.Errorf("a wrong token: %+v", r)
	}
	if r := cellvmEnv(t, nil, "", "sandbox", "ls", "--url", d.url, "--token-file", d.tokenFile); r.code != exitUnreachable {
		t.Errorf("an untrusted certificate: exit %d, stderr %q; want 3", r.code, r.stderr)
	}
	// Metrics over TLS parse with the Prometheus parser and count the
	// requests just made.
	resp, err := d.httpClient(t, remoteToken).Get(d.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	for _, name := range []string{"cellvm_sandboxes", "cellvm_cells_total", "cellvm_sandbox_create_seconds", "cellvm_api_requests_total", "cellvm_host_sandboxes_used"} {
		if fams[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}
	if log := d.log.String(); strings.Contains(log, remoteToken) || strings.Contains(log, "not-the-token") || strings.Contains(log, "wrong-token") {
		t.Errorf("a token reached the daemon's log")
	}
}

func mcpText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPOverStreamableHTTP uses the SDK's own client over HTTPS with the
// token: the tools, two cells sharing state, an image, and the session's
// end removing its sandbox.
func TestMCPOverStreamableHTTP(t *testing.T) {
	d := startRemoteDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Without the token the MCP endpoint is closed too.
	resp, err := d.httpClient(t, "").Post(d.url+api.MCPPath, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("MCP without a token: %d", resp.StatusCode)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "cellvm-test", Version: "0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: d.url + api.MCPPath, HTTPClient: d.httpClient(t, remoteToken)}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	names := mcpToolNames(t, ctx, cs)
	for _, want := range []string{agent.ToolRunPython, agent.ToolExec, agent.ToolReadFile, agent.ToolWriteFile, agent.ToolRestartPython, agent.ToolListFiles, agent.ToolUploadFile} {
		if !strings.Contains(strings.Join(names, ","), want) {
			t.Errorf("tool %s missing from %v", want, names)
		}
	}
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return r
	}
	if r := call(agent.ToolRunPython, map[string]any{"code": "x = 41"}); r.IsError {
		t.Fatalf("x = 41: %s", mcpText(r))
	}
	if r := call(agent.ToolRunPython, map[string]any{"code": "print(x)"}); r.IsError || !strings.Contains(mcpText(r), "41") {
		t.Errorf("the second cell does not see the first's x: %s", mcpText(r))
	}
	r := call(agent.ToolRunPython, map[string]any{"code": cellChart})
	var img *mcp.ImageContent
	for _, c := range r.Content {
		if ic, ok := c.(*mcp.ImageContent); ok {
			img = ic
		}
	}
	if img == nil || img.MIMEType != "image/png" || !bytes.HasPrefix(img.Data, []byte("\x89PNG")) {
		t.Errorf("the chart is not MCP image content: %+v", r.Content)
	}
	if r := call(agent.ToolUploadFile, map[string]any{"path": "/workspace/b.bin", "content_base64": "AAEC"}); r.IsError || !strings.Contains(mcpText(r), "wrote 3 bytes") {
		t.Errorf("upload_file: %s", mcpText(r))
	}
	if r := call(agent.ToolRestartPython, map[string]any{}); r.IsError {
		t.Errorf("restart_python: %s", mcpText(r))
	}
	if r := call(agent.ToolRunPython, map[string]any{"code": "print(x)"}); !strings.Contains(mcpText(r), "NameError") {
		t.Errorf("x survived restart_python: %s", mcpText(r))
	}
	list := func() []sandbox.Info {
		var l []sandbox.Info
		r := d.cellvm(t, "sandbox", "ls", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &l); err != nil {
			t.Fatalf("ls: %+v", r)
		}
		return l
	}
	if l := list(); len(l) != 1 {
		t.Fatalf("%d sandboxes for one MCP session, want 1", len(l))
	}
	// The session ends (the client's DELETE): its sandbox goes.
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(list()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the session's sandbox outlived the session: %+v", list())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
