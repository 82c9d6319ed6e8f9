package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
	"github.com/cellvm/cellvm/test/netnstest"
	"github.com/cellvm/cellvm/test/wheeltest"
)

// The test package index: a PEP 503 "simple" index on plain HTTP with its
// own DNS server, in a world namespace the test makes. The index's address
// is in a documentation range (public to this daemon by --public-ranges);
// the DNS server is the daemon's upstream (--dns-upstream).
const (
	indexName   = "pypi.cellvm.test"
	indexAddr   = "198.51.100.20"
	indexDNS    = "192.0.2.2:53"
	indexWorld  = "cellvm-test-index"
	probeDist   = "cellvm-probe"
	probeModule = "cellvm_probe"
	probeValue  = "served by the test index"
	probeWheel  = "cellvm_probe-1.0-py3-none-any.whl"
	// envIndexRole makes the test binary the index's servers (its value
	// is the directory served).
	envIndexRole = "CELLVM_TEST_INDEX_DIR"
)

// buildProbeWheel writes a pure-Python wheel of cellvm_probe 1.0 and the
// simple index that serves it into dir: no network, no build tools.
func buildProbeWheel(t *testing.T, dir string) {
	t.Helper()
	w := wheeltest.Wheel{Dist: probeDist, Module: probeModule, Version: "1.0", Init: fmt.Sprintf("VALUE = %q\n", probeValue)}
	if w.FileName() != probeWheel {
		t.Fatalf("the probe wheel is %s, want %s", w.FileName(), probeWheel)
	}
	if err := wheeltest.WriteIndex(dir, w); err != nil {
		t.Fatal(err)
	}
}

// serveIndex is the test binary's role in the index's world: HTTP on port
// 80 serving dir, and DNS on port 53 answering indexName with indexAddr
// (anything else: NXDOMAIN). It logs each HTTP request to stderr.
func serveIndex(dir string) int {
	zone := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if len(req.Question) == 1 && strings.EqualFold(req.Question[0].Name, indexName+".") {
			if req.Question[0].Qtype == dns.TypeA {
				m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: req.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(indexAddr)})
			}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		w.WriteMsg(m)
	})
	for _, network := range []string{"udp", "tcp"} {
		srv := &dns.Server{Addr: indexDNS, Net: network, Handler: zone}
		go func() {
			if err := srv.ListenAndServe(); err != nil {
				fmt.Fprintln(os.Stderr, "index dns:", err)
				os.Exit(1)
			}
		}()
	}
	files := http.FileServer(http.Dir(dir))
	err := http.ListenAndServe(indexAddr+":80", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(os.Stderr, "index: %s %s %s\n", r.Method, r.Host, r.URL.Path)
		files.ServeHTTP(w, r)
	}))
	fmt.Fprintln(os.Stderr, "index http:", err)
	return 1
}

// makeIndexWorld builds the index's world namespace, reached from the
// test's own namespace through a veth (192.0.2.1 <-> 192.0.2.2), and starts
// the index in it.
func makeIndexWorld(t *testing.T, dir string) *bytes.Buffer {
	t.Helper()
	if !netnstest.InChild() {
		t.Fatal("makeIndexWorld outside a namespace of the test's own would change the host's routes")
	}
	makeWorldNetns(t, indexWorld, "cvt-iup", "cvt-idown", "192.0.2.1/24", "192.0.2.2/24", indexAddr)
	var log bytes.Buffer
	srv := exec.Command("ip", "netns", "exec", indexWorld, os.Args[0])
	srv.Env = append(os.Environ(), envIndexRole+"="+dir)
	srv.Stderr = &log
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + indexAddr + "/simple/" + probeDist + "/")
		if err == nil {
			r.Body.Close()
			if r.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test index is not reachable from the host: %v %v\n%s", r, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &log
}

// TestPipThroughTheAllowlist, through the API: a sandbox whose policy
// allows the test index's name (and whose env points pip at it, as for a
// private index) installs the test's wheel with %pip, and the next cell
// imports it.
func TestPipThroughTheAllowlist(t *testing.T) {
	kvmtest.Require(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for TAPs and iptables")
	}
	if !netnstest.Isolate(t) {
		return
	}
	dir := t.TempDir()
	buildProbeWheel(t, filepath.Join(dir, "index"))
	indexLog := makeIndexWorld(t, filepath.Join(dir, "index"))
	d := startDaemon(t, dir, "--network", "--public-ranges", "198.51.100.0/24", "--dns-upstream", indexDNS, "--max-cell-timeout", "30m")
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 512,
		Network: &sandbox.NetworkPolicy{Allow: []string{indexName}},
		Env:     map[string]string{"PIP_INDEX_URL": "http://" + indexName + "/simple/", "PIP_TRUSTED_HOST": indexName}})
	if err != nil {
		t.Fatal(err)
	}
	r := mustCell(t, c, info.ID, "%pip install "+probeDist, 10*time.Minute)
	t.Logf("%%pip install: status %s in %d ms\n%s%s", r.Status, r.DurationMS, r.Stdout, r.Stderr)
	if r.Status != cell.StatusOK || !strings.Contains(r.Stdout, "Successfully installed "+probeDist+"-1.0") {
		t.Errorf("%%pip install %s through the allowlist: %+v\nindex log:\n%s", probeDist, r, indexLog.String())
	}
	r = mustCell(t, c, info.ID, "import "+probeModule+"\nprint("+probeModule+".__file__)\n"+probeModule+".VALUE", 5*time.Minute)
	if r.Status != cell.StatusOK || text(r) != fmt.Sprintf("'%s'", probeValue) || !strings.HasPrefix(r.Stdout, "/home/user/.local/") {
		t.Errorf("import %s in the next cell: %+v; want %q from the cell user's site", probeModule, r, probeValue)
	}
	if !strings.Contains(indexLog.String(), "GET "+indexName+" /packages/cellvm_probe-1.0-py3-none-any.whl") {
		t.Errorf("the index did not serve the wheel by its name:\n%s", indexLog.String())
	}
	if err := c.Delete(ctx, info.ID); err != nil {
		t.Error(err)
	}
}

// TestDefaultImageKit, through the API, in one sandbox without a network
// policy: the image's data-science kit imports, the image carries the
// manifest that the tool description is generated from, %pip install
// fails fast with an error that says there is no network, and a wheel file
// uploaded to /workspace installs and imports.
func TestDefaultImageKit(t *testing.T) {
	kvmtest.Require(t)
	dir := t.TempDir()
	d := startDaemon(t, dir, "--network=false", "--max-cell-timeout", "30m")
	defer d.stop(t)
	c := api.NewClient(d.socket)
	ctx := context.Background()
	info, err := c.Create(ctx, sandbox.Config{MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	r := mustCell(t, c, info.ID, "import sklearn, seaborn, sympy, statsmodels.api, networkx, requests, bs4, lxml.etree, openpyxl, plotly\n"+
		"from sklearn.linear_model import LinearRegression\n"+
		"LinearRegression().fit([[0], [1], [2]], [1, 3, 5]).predict([[3]])[0].round(6)", 15*time.Minute)
	t.Logf("imports: status %s in %d ms", r.Status, r.DurationMS)
	if r.Status != cell.StatusOK || text(r) != "7.0" {
		t.Errorf("the kit in the default image: %+v", r)
	}
	r = mustCell(t, c, info.ID, "print(open('"+manifest.PathInImage+"').read())", time.Minute)
	var inImage manifest.Manifest
	if err := json.Unmarshal([]byte(r.Stdout), &inImage); err != nil || !reflect.DeepEqual(inImage, manifest.Default()) {
		t.Errorf("the image's %s (%v) is not the manifest the tool description is generated from:\n%s", manifest.PathInImage, err, r.Stdout)
	}
	// pip's own start-up takes tens of seconds under nested emulation, so
	// what the network costs is measured against the same install with
	// --no-index (the same code path, no attempt at a network), run once
	// to warm pip's files and once more after.
	noIndex := "%pip install --no-index " + probeDist
	mustCell(t, c, info.ID, noIndex, 5*time.Minute)
	r = mustCell(t, c, info.ID, "%pip install "+probeDist, 5*time.Minute)
	t.Logf("%%pip install without a policy: status %s in %d ms\n%s%s", r.Status, r.DurationMS, r.Stdout, r.Stderr)
	if r.Status != cell.StatusError || r.Error == nil || r.Error.Name != "PipError" || !strings.Contains(r.Error.Value, "no network access") {
		t.Errorf("%%pip install without a policy: %+v (error %+v); want a PipError saying there is no network", r, r.Error)
	}
	if n := strings.Count(r.Stdout+r.Stderr, "Retrying"); n > 1 {
		t.Errorf("pip retried %d times, want at most 1 (the image's /etc/pip.conf)", n)
	}
	base := mustCell(t, c, info.ID, noIndex, 5*time.Minute)
	t.Logf("%%pip install --no-index: status %s in %d ms", base.Status, base.DurationMS)
	if base.Status != cell.StatusError {
		t.Errorf("%%pip install --no-index %s: %+v; want an error", probeDist, base)
	}
	if extra := r.DurationMS - base.DurationMS; extra > 10_000 {
		t.Errorf("%%pip install without a policy took %d ms, %d ms more than without an index: want the error within 10 s of pip's start-up (pip.conf: retries, timeout)", r.DurationMS, extra)
	}
	// What the description promises without a network: a wheel file
	// under /workspace installs, and imports in the next cell.
	wheels := t.TempDir()
	buildProbeWheel(t, wheels)
	whl, err := os.Open(filepath.Join(wheels, "packages", probeWheel))
	if err != nil {
		t.Fatal(err)
	}
	defer whl.Close()
	if _, err := c.Upload(ctx, info.ID, "/workspace/"+probeWheel, whl); err != nil {
		t.Fatal(err)
	}
	r = mustCell(t, c, info.ID, "%pip install /workspace/"+probeWheel, 5*time.Minute)
	if r.Status != cell.StatusOK || !strings.Contains(r.Stdout, "Successfully installed "+probeDist+"-1.0") {
		t.Errorf("%%pip install of a wheel file without a network: %+v", r)
	}
	r = mustCell(t, c, info.ID, "import "+probeModule+"\n"+probeModule+".VALUE", time.Minute)
	if r.Status != cell.StatusOK || text(r) != fmt.Sprintf("'%s'", probeValue) {
		t.Errorf("import %s after installing its wheel file: %+v", probeModule, r)
	}
	if err := c.Delete(ctx, info.ID); err != nil {
		t.Error(err)
	}
}
