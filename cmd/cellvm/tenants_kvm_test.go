package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestTenantsThroughTheJailedDaemon is issue 23's proof on real VMs: two
// tenants' tokens over the daemon's TLS listener; beta cannot reach
// alpha's sandbox, its "data" workspace is another volume, a quota
// refuses with no VM started, env values stay out of answers and logs,
// and the audit log holds both tenants' records and no secret.
func TestTenantsThroughTheJailedDaemon(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokenFile, []byte(alphaToken+" alpha\n"+betaToken+" beta\n"), 0o600)
	d := startDaemon(t, dir, "--network=false", "--workspace-mib", "64", "--listen", "tcp://127.0.0.1:0",
		"--token-file", tokenFile, "--tenant-max-sandboxes", "1")
	defer func() { d.stop(t) }()
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(50 * time.Millisecond) {
		m = regexp.MustCompile(`listening over TLS" addr=(\S+) cert=(\S+)`).FindStringSubmatch(d.log.String())
		if m == nil && time.Now().After(deadline) {
			t.Fatalf("no TLS listener in the log:\n%s", d.log.String())
		}
	}
	dial := func(token string) *api.Client {
		c, err := api.Dial("https://"+m[1], api.WithToken(token), api.WithCAFile(m[2]))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alpha, beta := dial(alphaToken), dial(betaToken)
	ctx := context.Background()

	a, err := alpha.Create(ctx, sandbox.Config{Workspace: "data", Env: map[string]string{"API_KEY": envSecret}})
	if err != nil {
		t.Fatal(err)
	}
	r := mustCell(t, alpha, a.ID, "import os\nx = 41\nopen('/workspace/notes.txt', 'w').write('alpha only')\nos.environ['API_KEY'] == '"+envSecret+"'", 2*time.Minute)
	if r.Status != cell.StatusOK || text(r) != "True" {
		t.Fatalf("alpha's first cell: %+v", r)
	}
	// Beta: alpha's sandbox is missing to it on every route tried.
	notFound := func(what string, err error) {
		t.Helper()
		var e *api.Error
		if !errors.As(err, &e) || e.Status != http.StatusNotFound {
			t.Errorf("beta's %s of alpha's sandbox: %v, want 404", what, err)
		}
	}
	_, err = beta.Get(ctx, a.ID)
	notFound("get", err)
	_, err = beta.RunCell(ctx, a.ID, sandbox.Cell{Code: "print(x)", Timeout: time.Minute}, nil)
	notFound("cell", err)
	_, err = beta.Exec(ctx, a.ID, sandbox.ExecRequest{Argv: []string{"cat", "/workspace/notes.txt"}, Timeout: time.Minute})
	notFound("exec", err)
	_, err = beta.Download(ctx, a.ID, "/workspace/notes.txt", &strings.Builder{})
	notFound("download", err)
	notFound("delete", beta.Delete(ctx, a.ID))
	if l, err := beta.List(ctx); err != nil || len(l) != 0 {
		t.Errorf("beta's list: %+v %v", l, err)
	}
	// Beta's data is its own volume, empty, mounted while alpha holds
	// alpha's.
	b, err := beta.Create(ctx, sandbox.Config{Workspace: "data"})
	if err != nil {
		t.Fatalf("beta's create with its data workspace: %v", err)
	}
	r = mustCell(t, beta, b.ID, "import os\nsorted(n for n in os.listdir('/workspace') if n != 'lost+found')", 2*time.Minute)
	if r.Status != cell.StatusOK || text(r) != "[]" {
		t.Errorf("beta's data workspace holds %s (%+v); want nothing", text(r), r)
	}
	for _, f := range []string{"alpha~data.ext4", "beta~data.ext4"} {
		if _, err := os.Stat(filepath.Join(d.state, "workspaces", f)); err != nil {
			t.Errorf("workspace file %s: %v", f, err)
		}
	}
	// A quota: alpha's second sandbox is refused, and no VM starts.
	vmms := len(vmmProcesses(dir))
	_, err = alpha.Create(ctx, sandbox.Config{})
	var e *api.Error
	if !errors.As(err, &e) || e.Status != http.StatusTooManyRequests || !strings.Contains(e.Message, "max_sandboxes") {
		t.Errorf("alpha past its cap: %v, want 429 naming max_sandboxes", err)
	}
	if n := len(vmmProcesses(dir)); n != vmms {
		t.Errorf("a refused create started a VM: %d VMMs, were %d", n, vmms)
	}
	// Alpha's sandbox still has its state.
	if r := mustCell(t, alpha, a.ID, "x + 1", time.Minute); text(r) != "42" {
		t.Errorf("alpha's x after beta's attempts: %+v", r)
	}
	info, err := alpha.Get(ctx, a.ID)
	if err != nil || len(info.Config.Env) != 0 || strings.Join(info.EnvNames, ",") != "API_KEY" {
		t.Errorf("alpha's info: env %v, names %v, %v; want the name only", info.Config.Env, info.EnvNames, err)
	}
	var logs strings.Builder
	for _, src := range []sandbox.LogSource{sandbox.LogConsole, sandbox.LogAgent, sandbox.LogVMM} {
		alpha.Logs(ctx, a.ID, sandbox.LogRequest{Source: src, Tail: sandbox.MaxLogTail}, func(l sandbox.LogLine) error {
			logs.WriteString(l.Text + "\n")
			return nil
		})
	}
	if strings.Contains(logs.String(), envSecret) || strings.Contains(d.log.String(), envSecret) {
		t.Errorf("the env value is in a log")
	}
	if err := alpha.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := beta.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(d.state, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	audit := string(raw)
	for _, s := range []string{alphaToken, betaToken, envSecret} {
		if strings.Contains(audit, s) {
			t.Errorf("the audit log holds a secret (%.8s...)", s)
		}
	}
	if !strings.Contains(audit, `"tenant":"alpha"`) || !strings.Contains(audit, `"tenant":"beta","token_id"`) ||
		strings.Count(audit, `"status":404`) < 5 || !strings.Contains(audit, `"status":429`) {
		t.Errorf("the audit log lacks the tenants' records, beta's refusals or the quota's:\n%s", audit)
	}
}
