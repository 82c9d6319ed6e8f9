package clients

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// TestPythonClient runs the Python client's own tests (python -m unittest)
// against the daemon's API over the fake manager: streaming order, every
// error code, binary files, timeouts, a connection broken mid-stream.
func TestPythonClient(t *testing.T) {
	py := python(t)
	m, env := fakeDaemons(t)
	out := runIn(t, filepath.Join(clientsDir(t), "python"), append(env,
		"PYTHONPATH="+filepath.Join(clientsDir(t), "python"), "PYTHONDONTWRITEBYTECODE=1"), 5*time.Minute, py, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	t.Logf("%s:\n%s", py, out)
	checkFakeAfterClients(t, m, out)
}

// fakeDaemons serves the API over one fake manager on two sockets, one of
// which refuses this user (403), and over TLS with a bearer token (as
// `cellvm serve --listen` does), and returns the manager and the
// environment that tells the clients' tests where they are.
func fakeDaemons(t *testing.T) (*sandboxtest.Manager, []string) {
	m := sandboxtest.New()
	// serve's default lifetimes, which a create without ttl_s and
	// idle_timeout_s gets.
	m.Lifetimes = sandbox.Lifetimes{DefaultTTL: time.Hour, DefaultIdleTimeout: 15 * time.Minute}
	sock := serveAPI(t, m)
	forbidden := serveAPI(t, m, api.AllowUIDs(os.Getuid()+4242))
	url, token, ca := serveTLS(t, m)
	echoPorts(t, m)
	return m, []string{"CELLVM_TEST_FAKE_SOCKET=" + sock, "CELLVM_TEST_FORBIDDEN_SOCKET=" + forbidden,
		"CELLVM_TEST_FAKE_URL=" + url, "CELLVM_TEST_FAKE_TOKEN=" + token, "CELLVM_TEST_FAKE_CA=" + ca}
}

// checkFakeAfterClients checks, on the daemon's side, what the clients'
// tests can only infer: a timed-out call closed its connection (the cell's
// context ended) and every sandbox, snapshot and workspace the tests
// created was deleted.
func checkFakeAfterClients(t *testing.T, m *sandboxtest.Manager, out string) {
	t.Helper()
	if strings.Contains(out, "skipped 'needs the fake daemon") {
		t.Errorf("tests skipped for want of the fake daemon:\n%s", out)
	}
	events := strings.Join(m.Happened(), "\n")
	if strings.Contains(events, "the client stayed a minute") || !strings.Contains(events, "the client went away") {
		t.Errorf("a client's timeout did not close its connection; the fake saw:\n%s", events)
	}
	left := leftoversOf(t, m)
	if len(left.sandboxes) != 0 {
		t.Errorf("the tests left sandboxes behind: %v", left.sandboxes)
	}
	if len(left.snapshots) != 0 {
		t.Errorf("the tests left snapshots behind: %v", left.snapshots)
	}
	if len(left.workspaces) != 0 {
		t.Errorf("the tests left workspaces behind: %v", left.workspaces)
	}
}

// leftovers is what a manager has: its sandboxes' and snapshots' ids,
// and its workspaces' and images' names.
type leftovers struct{ sandboxes, snapshots, workspaces, images []string }

// leftoversOf asks m what it has.
func leftoversOf(t *testing.T, m sandbox.Manager) leftovers {
	t.Helper()
	ctx := context.Background()
	boxes, err := m.List(ctx)
	sandboxes := namesOf(t, boxes, err, func(i sandbox.Info) string { return i.ID })
	snaps, err := m.ListSnapshots(ctx)
	snapshots := namesOf(t, snaps, err, func(s sandbox.SnapshotInfo) string { return s.ID })
	wss, err := m.Workspaces(ctx)
	workspaces := namesOf(t, wss, err, func(w sandbox.WorkspaceInfo) string { return w.Name })
	imgs, err := m.Images(ctx)
	images := namesOf(t, imgs, err, func(i sandbox.ImageInfo) string { return i.Name })
	return leftovers{sandboxes, snapshots, workspaces, images}
}

// namesOf names each of list, failing t on err.
func namesOf[T any](t *testing.T, list []T, err error, name func(T) string) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, x := range list {
		out = append(out, name(x))
	}
	return out
}

// TestPythonPackageInstallsOffline: `pip install ./clients/python` works
// in a fresh virtual environment with no index at all (--no-index) and
// without the system's packages, and the installed package imports.
func TestPythonPackageInstallsOffline(t *testing.T) {
	py := python(t)
	venv := filepath.Join(t.TempDir(), "venv")
	if out, err := exec.Command(py, "-m", "venv", venv).CombinedOutput(); err != nil {
		t.Skipf("%s -m venv does not work here (Debian: apt-get install python3-venv): %v\n%s", py, err, out)
	}
	runIn(t, clientsDir(t), []string{"PIP_DISABLE_PIP_VERSION_CHECK=1"}, 5*time.Minute,
		filepath.Join(venv, "bin", "pip"), "install", "--no-index", "./python")
	out := runIn(t, t.TempDir(), nil, time.Minute, filepath.Join(venv, "bin", "python"), "-c",
		"import cellvm, cellvm.tools, cellvm.compat.boxlite, cellvm.compat.withruntime; print(cellvm.__file__); print(cellvm.tools.TOOL_NAME)")
	if !strings.HasPrefix(out, venv) || !strings.Contains(out, "run_python") {
		t.Errorf("the installed package is not the one imported, or lacks its tool definition:\n%s", out)
	}
}

// TestJSClient runs the JS client's own tests (node --test, nothing
// installed) against the daemon's API over the fake manager.
func TestJSClient(t *testing.T) {
	nd := node(t)
	m, env := fakeDaemons(t)
	out := runIn(t, filepath.Join(clientsDir(t), "js"), env, 5*time.Minute, nd, "--test")
	t.Logf("%s --test:\n%s", nd, out)
	if !strings.Contains(out, "# fail 0") || strings.Contains(out, "# skipped") && !strings.Contains(out, "# skipped 0") {
		t.Errorf("node --test did not pass every test:\n%s", out)
	}
	checkFakeAfterClients(t, m, out)
}
