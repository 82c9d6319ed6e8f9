package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestE2BSDK is issue 26's proof: E2B's own JS SDKs (test/e2b, pinned by
// its package-lock), unchanged, drive a jailed daemon's E2B front end
// over TLS: create, runCode, files, commands, a PTY, a port, list,
// setTimeout, connect, pause, kill and auth (test/e2b/sdk.test.mjs), in
// one sandbox. The SDK gets only E2B_DOMAIN, E2B_API_KEY and the
// daemon's self-signed certificate (which covers *.e2b.test) as
// NODE_EXTRA_CA_CERTS; the wildcard name resolves through
// test/e2b/dns-hook.mjs. E2B_TEST_SKIP (comma-separated parts) skips
// parts not built yet, saying so.
func TestE2BSDK(t *testing.T) {
	kvmtest.Require(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed on the rig's host: the E2B SDK test needs node 20.18 or later")
	}
	sdk := filepath.Join(kvmtest.RepoRoot(t), "test", "e2b")
	if _, err := os.Stat(filepath.Join(sdk, "node_modules", "e2b", "package.json")); err != nil {
		t.Skip("test/e2b/node_modules is missing: run `make e2b-sdk` on the host")
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "tokens")
	const alpha, beta = "e2b-alpha-token-0123456789", "e2b-beta-token-01234567890"
	os.WriteFile(tokenFile, []byte(alpha+" alpha\n"+beta+" beta\n"), 0o600)
	d := startDaemon(t, dir, "--network=false", "--listen", "tcp://127.0.0.1:0", "--token-file", tokenFile,
		"--e2b-domain", "e2b.test", "--cell-timeout", "10m")
	defer func() { d.stop(t) }()
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil; time.Sleep(50 * time.Millisecond) {
		m = regexp.MustCompile(`listening over TLS" addr=\S+:(\d+) cert=(\S+)`).FindStringSubmatch(d.log.String())
		if m == nil && time.Now().After(deadline) {
			t.Fatalf("no TLS listener in the log:\n%s", d.log.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--import", "./dns-hook.mjs", "--test", "--test-reporter=spec", "sdk.test.mjs")
	cmd.Dir = sdk
	cmd.WaitDelay = 5 * time.Second
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") && !strings.HasPrefix(kv, "NODE_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"E2B_DOMAIN=e2b.test:"+m[1],
		"E2B_API_KEY="+alpha,
		"NODE_EXTRA_CA_CERTS="+m[2],
		"E2B_TEST_RESOLVE=e2b.test=127.0.0.1",
		"E2B_TEST_OTHER_KEY="+beta,
		"E2B_TEST_NO_INTERNET=1",
		"E2B_TEST_TIMEOUT_MS=300000",
		"E2B_TEST_SKIP="+os.Getenv("E2B_TEST_SKIP"),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node sdk.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("E2B's SDK failed against the daemon: %v", err)
	}
	if n := len(vmmProcesses(d.state)); n != 0 {
		t.Errorf("%d VMMs left after the SDK killed its sandbox", n)
	}
}
