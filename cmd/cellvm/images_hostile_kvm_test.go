package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/test/netnstest"
	"github.com/cellvm/cellvm/test/wheeltest"
)

// The markers hostile build inputs try to write when Python starts: in
// the build's root, and through /proc/1/root in the root of whatever
// runs the build (the host, when builds ran there).
const (
	pthMarker  = "/tmp/PTH_RAN"
	siteMarker = "/tmp/SITE_RAN"
	metadataIP = "169.254.169.254"
)

// markerCode is Python that writes marker in / and in /proc/1/root/.
func markerCode(marker string) string {
	return "for p in ('" + marker + "', '/proc/1/root" + marker + "'):\n" +
		"    try:\n        open(p, 'w').write('ran')\n    except Exception:\n        pass\n"
}

// pthWheel is a wheel whose .pth file runs markerCode(pthMarker) at every
// Python start on the site it is installed in.
func pthWheel() wheeltest.Wheel {
	line := "import os; exec(" + strconvQuote(markerCode(pthMarker)) + ")\n"
	return wheeltest.Wheel{Dist: "cellvm-pth", Module: "cellvm_pth", Version: "1.0", Init: "", Extra: map[string]string{"cellvm_pth.pth": line}}
}

// strconvQuote quotes s as a Python string literal (ASCII only here).
func strconvQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`, "\n", `\n`).Replace(s) + "'"
}

// topEntries maps the entries of dir to their modification times.
func topEntries(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]time.Time{}
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			m[e.Name()] = info.ModTime()
		}
	}
	return m
}

// serveMetadata puts a stand-in for a cloud's metadata service at
// 169.254.169.254:80 in the index's world, reachable from the test's own
// namespace (checked): what a build must not reach. It returns its log.
func serveMetadata(t *testing.T) *syncBuffer {
	t.Helper()
	addWorldAddr(t, indexWorld, "cvt-idown", "192.0.2.2", metadataIP)
	var l net.Listener
	inNetns(t, indexWorld, func() (err error) {
		l, err = net.Listen("tcp", metadataIP+":80")
		return err
	})
	t.Cleanup(func() { l.Close() })
	log := &syncBuffer{}
	serveLogged(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "instance-secret\n") }), log, "metadata")
	r, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + metadataIP + "/")
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("the metadata stand-in is not reachable from the test's namespace: %v %v", r, err)
	}
	r.Body.Close()
	// Wait for the probe's line, then forget it: from here on a line is a
	// build's request.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(log.String(), "GET") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	log.Reset()
	return log
}

// TestImageBuildsAreHostile: builds whose inputs attack the machine that
// builds them run nothing and delete nothing on the host, now that every
// build runs in a builder microVM. Through the CLI, on the default image:
// a wheel whose .pth writes /tmp/PTH_RAN and /proc/1/root/tmp/PTH_RAN at
// every Python start, a --files tree with a sitecustomize.py that does the
// same and a link var/tmp -> ../../../../../../../tmp/victim-<random> (the
// old host-side cleanup deleted through it), and a requirements file whose
// --find-links line points at the test's index (which serves what it
// names). Through the API: a build whose run step connects to
// 169.254.169.254 (a metadata stand-in the test's namespace reaches) fails
// at that step with the connection refused, and the stand-in saw no
// request. After all of it: no marker in the host's /tmp, the victim's
// file is there, and nothing in the host's / or /tmp changed that the
// test did not make.
func TestImageBuildsAreHostile(t *testing.T) {
	kvmtest.Require(t)
	if !netnstest.Isolate(t) {
		return
	}
	ctx := context.Background()
	dir := t.TempDir()
	buildProbeWheel(t, filepath.Join(dir, "index"))
	indexLog := makeIndexWorld(t, filepath.Join(dir, "index"))
	metaLog := serveMetadata(t)
	for _, m := range []string{pthMarker, siteMarker} {
		if _, err := os.Lstat(m); err == nil {
			t.Fatalf("%s exists before the test, so it cannot tell: remove it", m)
		}
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	victim := "/tmp/victim-" + hex.EncodeToString(rnd[:])
	if err := os.MkdirAll(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(victim) })
	const keep = "the victim's file\n"
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte(keep), 0o644); err != nil {
		t.Fatal(err)
	}

	// The inputs.
	wheels := filepath.Join(dir, "wheels")
	os.MkdirAll(wheels, 0o755)
	if _, err := pthWheel().WriteFile(wheels); err != nil {
		t.Fatal(err)
	}
	req := filepath.Join(dir, "requirements.txt")
	if err := os.WriteFile(req, []byte("--find-links http://"+indexAddr+"/packages/\ncellvm-pth\n"+probeDist+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := filepath.Join(dir, "files")
	site := filepath.Join(files, "usr/lib/python3/dist-packages")
	for _, d := range []string{filepath.Join(files, "var"), site} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../../../../../../.."+victim, filepath.Join(files, "var/tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(site, "sitecustomize.py"), []byte(markerCode(siteMarker)), 0o644); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, dir, "--network", "--public-ranges", "198.51.100.0/24", "--dns-upstream", indexDNS)
	defer func() { d.stop(t) }()
	c := api.NewClient(d.socket)
	rootBefore, tmpBefore := topEntries(t, "/"), topEntries(t, "/tmp")

	r := cellvmCLI(t, d.socket, buildTimeout, "image", "build", "hostile", "--pip-wheels", wheels, "--requirements", req,
		"--pip-index", "http://"+indexName+"/simple/", "--files", files)
	// The build itself may succeed (its damage stays in its VM and its
	// image) or fail at a named step; what matters is the host, below.
	if r.code == 2 {
		t.Errorf("cellvm image build hostile: exit 2, a usage error: the test's inputs are valid\n%s", r.stderr)
	}
	t.Logf("index log:\n%s", indexLog.String())
	// L1's disk is its memory: the next build needs the room this image
	// takes (a copy of the 1 GiB default image).
	if _, ok := imageNamed(t, c, "hostile"); ok {
		if err := c.DeleteImage(ctx, "hostile"); err != nil {
			t.Errorf("delete image hostile: %v", err)
		}
	}

	// The network policy during a build: a pip step opens the index's
	// host; a run step then tries the metadata address.
	probe := `python3 - <<'EOF'
import socket, urllib.request
try:
    urllib.request.urlopen('http://` + indexName + `/simple/', timeout=20).read()
    print('index: reachable', flush=True)
except Exception as e:
    print('index: not reachable:', e, flush=True)
print('metadata-probe: connecting', flush=True)
socket.create_connection(('` + metadataIP + `', 80), timeout=5)
print('metadata: CONNECTED', flush=True)
EOF`
	archive := tarBytes(t, []tarEntry{fileEntry("req.txt", probeDist+"\n", 0o644)})
	_, err := c.CreateImage(ctx, sandbox.ImageRequest{Name: "metadata", Archive: bytes.NewReader(archive), Recipe: &sandbox.ImageRecipe{Steps: []sandbox.RecipeStep{
		{Requirements: "req.txt", PipIndex: "http://" + indexName + "/simple/"},
		{Run: probe},
	}}}, nil)
	t.Logf("the metadata build: %v", err)
	var se *sandbox.ImageStepError
	switch {
	case !errors.As(err, &se):
		t.Errorf("a build whose run step connects to %s: %v; want an ImageStepError", metadataIP, err)
	case se.Step != sandbox.ImageStepRun:
		t.Errorf("the metadata build failed at step %q, want %q: %v", se.Step, sandbox.ImageStepRun, err)
	default:
		out := se.Tail + " " + err.Error()
		refused := slices.ContainsFunc([]string{"refused", "timed out", "unreachable", "No route", "not permitted"}, func(s string) bool { return strings.Contains(out, s) })
		if !strings.Contains(out, "metadata-probe: connecting") || strings.Contains(out, "metadata: CONNECTED") || !refused {
			t.Errorf("the run step's output does not say the connection to %s was refused:\n%s", metadataIP, out)
		}
	}
	if _, ok := imageNamed(t, c, "metadata"); ok {
		t.Error("the failed metadata build left an image")
	}
	if strings.Contains(metaLog.String(), "GET") {
		t.Errorf("the metadata stand-in was reached during a build:\n%s", metaLog.String())
	}

	// The host.
	for _, m := range []string{pthMarker, siteMarker} {
		if _, err := os.Lstat(m); err == nil {
			t.Errorf("%s is on the host: a build's Python ran here", m)
		}
	}
	if b, err := os.ReadFile(filepath.Join(victim, "keep")); err != nil || string(b) != keep {
		t.Errorf("the victim's file %s/keep: %q, %v; want it untouched", victim, b, err)
	}
	mine := filepath.Base(filepath.Dir(dir))
	rootAfter, tmpAfter := topEntries(t, "/"), topEntries(t, "/tmp")
	for name := range rootBefore {
		if _, ok := rootAfter[name]; !ok {
			t.Errorf("/%s is gone from the host", name)
		}
	}
	for name, mtime := range tmpBefore {
		after, ok := tmpAfter[name]
		switch {
		case !ok:
			t.Errorf("/tmp/%s is gone from the host", name)
		case !after.Equal(mtime) && name != mine && "/tmp/"+name != victim:
			t.Errorf("/tmp/%s changed during the builds (modified %v, was %v)", name, after, mtime)
		}
	}
	for name := range tmpAfter {
		if _, ok := tmpBefore[name]; !ok {
			t.Errorf("/tmp/%s appeared on the host during the builds", name)
		}
	}
	if pids := vmmProcesses(d.state); len(pids) > 0 {
		t.Errorf("VMM processes left after the builds: %v", pids)
	}
}
