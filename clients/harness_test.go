package clients

import (
	"bytes"
	"context"
	"encoding/pem"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveAPI serves the daemon's HTTP API over m on a fresh Unix socket, the
// way `cellvm serve` does (api.ListenUnix, api.NewHTTPServer,
// api.NewServer), and returns the socket's path. Uploads are capped at
// 1 MiB so the clients' too-large paths can be shown with small files.
func serveAPI(t *testing.T, m sandbox.Manager, opts ...api.ListenOption) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cellvm-clients-")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "cellvm.sock")
	ln, err := api.ListenUnix(sock, opts...)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	srv := api.NewHTTPServer(api.NewServer(m, log, api.WithMaxUploadBytes(1<<20)))
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		srv.Close()
		<-done
		os.RemoveAll(dir)
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	return sock
}

// serveTLS serves the API over m on a loopback TLS port behind bearer
// tokens (api.RequireToken, as `cellvm serve --listen` does) and returns
// its URL, the token and the PEM file of its certificate.
func serveTLS(t *testing.T, m sandbox.Manager) (url, token, caFile string) {
	t.Helper()
	dir := t.TempDir()
	token = "clients-test-token-0123456789"
	tokenFile := filepath.Join(dir, "tokens")
	os.WriteFile(tokenFile, []byte(token+"\n"), 0o600)
	tokens, err := api.LoadTokens(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv := httptest.NewUnstartedServer(api.RequireToken(api.NewServer(m, log, api.WithMaxUploadBytes(1<<20)), tokens, log))
	// A client that refuses the certificate (a test of that) aborts the
	// handshake; the server need not say so.
	srv.Config.ErrorLog = stdlog.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile = filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	return srv.URL, token, caFile
}

// clientsDir is this package's directory (the test's working directory).
func clientsDir(t *testing.T) string {
	t.Helper()
	d, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// python returns the interpreter the Python client is tested with:
// $CELLVM_TEST_PYTHON, else Debian's /usr/bin/python3, else python3 on
// PATH; it must be 3.9 or later (the package's floor).
func python(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("CELLVM_TEST_PYTHON"), "/usr/bin/python3"}
	if p, err := exec.LookPath("python3"); err == nil {
		candidates = append(candidates, p)
	}
	for _, p := range candidates {
		if p == "" {
			continue
		}
		out, err := exec.Command(p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
		if err != nil {
			continue
		}
		if atLeast(strings.TrimSpace(string(out)), 3, 9) {
			return p
		}
	}
	t.Skip("no python3 >= 3.9 (set CELLVM_TEST_PYTHON)")
	return ""
}

// node returns node on PATH if it is 18 or later.
func node(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH")
	}
	out, err := exec.Command(p, "--version").Output()
	if err != nil || !atLeast(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), 18, 0) {
		t.Skipf("node %s is older than 18", strings.TrimSpace(string(out)))
	}
	return p
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)`)

func atLeast(v string, major, minor int) bool {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(m[2])
	return a > major || a == major && b >= minor
}

// runIn runs a command in dir with extra environment, failing t (with its
// output) if it fails; it returns the output.
func runIn(t *testing.T, dir string, env []string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// repoRoot is the checkout's root.
func repoRoot(t *testing.T) string { return kvmtest.RepoRoot(t) }

// EchoPortLabel is the label with which a client's test asks the fake
// for a guest port: a sandbox created with EchoPortLabel=N gets, within
// moments, an echo server on its port N (sandboxtest's ListenPort), so
// the clients' connect_port can be shown end to end.
const EchoPortLabel = "cellvm-test-echo-port"

// echoPorts serves the ports EchoPortLabel asks for until the test ends.
func echoPorts(t *testing.T, m *sandboxtest.Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		served := map[string]bool{}
		var lns []net.Listener
		defer func() {
			for _, l := range lns {
				l.Close()
			}
		}()
		for ctx.Err() == nil {
			boxes, _ := m.List(ctx)
			for _, b := range boxes {
				port, err := strconv.Atoi(b.Config.Labels[EchoPortLabel])
				if err != nil || served[b.ID] {
					continue
				}
				served[b.ID] = true
				l, err := m.ListenPort(b.ID, port)
				if err != nil {
					continue
				}
				lns = append(lns, l)
				go func() {
					for {
						c, err := l.Accept()
						if err != nil {
							return
						}
						go func() { defer c.Close(); io.Copy(c, c) }()
					}
				}()
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
}
