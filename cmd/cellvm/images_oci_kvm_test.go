package main

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// What the image tests share: OCI images made in the test (from the rig's
// fixtures, test/nested/rig-fixtures.sh, and from the host's static
// busybox), go-containerregistry's own registry on loopback, the CLI run
// against the daemon with a build's patience, and checks that a failed
// image request left nothing behind.

// The fixtures build-kvm-tests.sh prepares on the host (rig-fixtures.sh):
// L1 has no network, so Debian's packages come from there.
const (
	// slimLayerFile is a python:slim-like root (debootstrap minbase with
	// python3, bookworm), as a gzip'd tar: the pushed image's layer 1.
	slimLayerFile = "rig/fixtures/pyslim.tar.gz"
	// slimOSReleaseFile is that root's /etc/os-release.
	slimOSReleaseFile = "rig/fixtures/pyslim.os-release"
	// mirrorSnapshotDir holds a signed snapshot of Debian's mirror with
	// jq's packages (dists/, pool/).
	mirrorSnapshotDir = "rig/fixtures/debian"
)

// Layer 2 of the test image: a file added, one of layer 1's whited out,
// a directory of layer 1 made opaque, a hard link, an owner, and a
// tar-slip: a link opt/x -> /tmp/victim, then a file opt/x/file.
const (
	addedFile    = "/opt/added.txt"
	addedText    = "added by layer 2\n"
	whitedOut    = "/etc/issue.net"
	slipVictim   = "/tmp/victim"
	slimFoo      = "FOO=bar"
	slimWorkDir  = "/srv/app"
	slimPath     = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	ownedUID     = 1234
	ownedGID     = 2345
	opaqueDir    = "/etc/apt/apt.conf.d"
	opaqueKept   = "99layer2"
	buildTimeout = 25 * time.Minute
)

// fixture returns the path of a rig fixture, failing t with what makes it
// when it is missing.
func fixture(t *testing.T, rel string) string {
	t.Helper()
	dir := os.Getenv("CELLVM_BUILD")
	if dir == "" {
		dir = filepath.Join(kvmtest.RepoRoot(t), "build")
	}
	p := filepath.Join(dir, rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is missing: run test/nested/rig-fixtures.sh (build-kvm-tests.sh runs it for the TestImage* tests): %v", p, err)
	}
	return p
}

// tarEntry is one entry of a layer made in the test.
type tarEntry struct {
	hdr  tar.Header
	body string
}

func dirEntry(name string, mode int64) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}}
}

func fileEntry(name, body string, mode int64) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, body: body}
}

func linkEntry(typ byte, name, target string) tarEntry {
	return tarEntry{hdr: tar.Header{Typeflag: typ, Name: name, Linkname: target, Mode: 0o777}}
}

// tarBytes packs entries, in order, as a tar archive.
func tarBytes(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := e.hdr
		h.Size = int64(len(e.body))
		if h.ModTime.IsZero() {
			h.ModTime = time.Unix(1_700_000_000, 0)
		}
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("layer entry %s: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// tarLayer is entries as an image layer (gzip'd by go-containerregistry).
func tarLayer(t *testing.T, entries []tarEntry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// slimLayer2 is the test image's second layer.
func slimLayer2(t *testing.T) v1.Layer {
	return tarLayer(t, []tarEntry{
		dirEntry("opt/", 0o755),
		fileEntry(strings.TrimPrefix(addedFile, "/"), addedText, 0o644),
		linkEntry(tar.TypeLink, "opt/hard.txt", strings.TrimPrefix(addedFile, "/")),
		{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "opt/owned.txt", Mode: 0o640, Uid: ownedUID, Gid: ownedGID}, body: "owned\n"},
		fileEntry("etc/.wh."+filepath.Base(whitedOut), "", 0o644),
		fileEntry(strings.TrimPrefix(opaqueDir, "/")+"/.wh..wh..opq", "", 0o644),
		fileEntry(strings.TrimPrefix(opaqueDir, "/")+"/"+opaqueKept, "// layer 2\n", 0o644),
		// The tar-slip: through the link, an extractor that follows links
		// on the host (or in the builder's own root) writes /tmp/victim/file.
		linkEntry(tar.TypeSymlink, "opt/x", slipVictim),
		fileEntry("opt/x/file", "slipped\n", 0o644),
	})
}

// slimImage is the test image: layer 1 the fixture's python:slim-like
// root, layer 2 slimLayer2, and a config with Env (PATH and FOO=bar) and
// WorkingDir /srv/app (which need not exist), no User. Labels make
// another image (another config, so another digest) of the same files.
// l1 is slimLayer1's, shared: its digests cost a read of 150 MiB each.
func slimImage(t *testing.T, l1 v1.Layer, labels map[string]string) v1.Image {
	t.Helper()
	return ociImage(t, v1.Config{Env: []string{slimPath, slimFoo}, WorkingDir: slimWorkDir, Labels: labels}, l1, slimLayer2(t))
}

// slimLayer1 is the fixture's root layer.
func slimLayer1(t *testing.T) v1.Layer {
	t.Helper()
	l1, err := tarball.LayerFromFile(fixture(t, slimLayerFile))
	if err != nil {
		t.Fatal(err)
	}
	return l1
}

// ociImage is an image of layers with config cfg, for linux/amd64.
func ociImage(t *testing.T, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.ConfigFile(empty.Image, &v1.ConfigFile{Architecture: "amd64", OS: "linux", Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.AppendLayers(img, layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// staticBusybox finds the host's static busybox (Debian's busybox-static,
// which the rig itself needs; L1 sees the host's root).
func staticBusybox(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p
		}
	}
	t.Fatal("no static busybox at /bin/busybox or /usr/bin/busybox: apt-get install busybox-static")
	return ""
}

// busyboxImage is a busybox-only image (no python3, no /etc/os-release):
// bin/busybox with a link for each of its applets, a passwd and a group,
// and a config with PATH=/bin, like Docker's busybox image.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	bb := staticBusybox(t)
	bin, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	list, err := exec.Command(bb, "--list").Output()
	if err != nil {
		t.Fatalf("%s --list: %v", bb, err)
	}
	entries := []tarEntry{dirEntry("bin/", 0o755), dirEntry("etc/", 0o755), dirEntry("root/", 0o700), dirEntry("home/", 0o755),
		dirEntry("proc/", 0o555), dirEntry("sys/", 0o555), dirEntry("dev/", 0o755), dirEntry("var/", 0o755),
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777}},
		fileEntry("bin/busybox", string(bin), 0o755),
		fileEntry("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n", 0o644),
		fileEntry("etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644),
	}
	n := 0
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" || strings.Contains(applet, "/") {
			continue
		}
		entries = append(entries, linkEntry(tar.TypeSymlink, "bin/"+applet, "busybox"))
		n++
	}
	if n < 50 || !slices.Contains(strings.Fields(string(list)), "sh") {
		t.Fatalf("%s --list gave %d applets, without sh?\n%s", bb, n, list)
	}
	return ociImage(t, v1.Config{Env: []string{"PATH=/bin"}}, tarLayer(t, entries))
}

// startRegistry starts go-containerregistry's registry (pkg/registry) on
// loopback, behind wrap when it is not nil, and returns its host:port.
// The daemon runs in the test's network namespace, so it reaches it.
func startRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushImage pushes img to ref (a plain-HTTP registry) and returns its
// manifest's digest.
func pushImage(t *testing.T, ref string, img v1.Image) string {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := remote.Write(r, img, remote.WithContext(context.Background())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s (%s) in %.1f s", ref, d, time.Since(start).Seconds())
	return d.String()
}

// saveImage writes img as a `docker save` tarball tagged tag, and returns
// its path.
func saveImage(t *testing.T, dir, tag string, img v1.Image) string {
	t.Helper()
	tg, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, strings.NewReplacer(":", "-", "/", "-").Replace(tag)+".tar")
	start := time.Now()
	if err := tarball.WriteToFile(p, tg, img); err != nil {
		t.Fatalf("docker save tarball of %s: %v", tag, err)
	}
	if st, err := os.Stat(p); err == nil {
		t.Logf("wrote %s (%d MiB) in %.1f s", p, st.Size()>>20, time.Since(start).Seconds())
	}
	return p
}

// cellvmCLI runs the CLI (the test binary as cellvm) against the daemon
// at socket, with an image build's patience, and logs its end.
func cellvmCLI(t *testing.T, socket string, timeout time.Duration, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CELLVM_TEST_MAIN=1", "CELLVM_SOCKET="+socket, "CELLVM_URL=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("cellvm %v: %v", args, err)
	}
	t.Logf("cellvm %s: exit %d in %.1f s\nstdout: %s\nstderr (end): %s", strings.Join(args, " "), code, time.Since(start).Seconds(),
		out.String(), lastLines(errb.String(), 30))
	return result{out.String(), errb.String(), code}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// imageNamed returns GET /v1/images' entry for name.
func imageNamed(t *testing.T, c *api.Client, name string) (sandbox.ImageInfo, bool) {
	t.Helper()
	list, err := c.Images(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range list {
		if im.Name == name {
			return im, true
		}
	}
	return sandbox.ImageInfo{}, false
}

// events records an image request's progress (called from the client's
// goroutine).
type events struct {
	mu   sync.Mutex
	list []sandbox.ImageEvent
}

func (e *events) add(ev sandbox.ImageEvent) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

// steps lists the steps that started, in order, once each.
func (e *events) steps() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s []string
	for _, ev := range e.list {
		if ev.Step != "" && !slices.Contains(s, ev.Step) {
			s = append(s, ev.Step)
		}
	}
	return s
}

// leftovers is what an image request may leave behind: the daemon's
// state directory's entries (images, work directories, disks), its VMM
// processes and the loop devices backed by a file under it.
type leftovers struct {
	state string
	files map[string]bool
}

func snapshotLeftovers(t *testing.T, state string) *leftovers {
	t.Helper()
	l := &leftovers{state: state, files: map[string]bool{}}
	filepath.WalkDir(state, func(p string, d os.DirEntry, err error) error {
		if err == nil && !ignoredStateFile(p) {
			l.files[strings.TrimPrefix(p, state)] = true
		}
		return nil
	})
	return l
}

// ignoredStateFile says which of the state directory's files change with
// any request: logs and the audit trail.
func ignoredStateFile(p string) bool {
	base := filepath.Base(p)
	return strings.HasSuffix(base, ".log") || strings.HasSuffix(base, ".jsonl") || strings.Contains(p, "/audit") || strings.HasSuffix(base, ".sock")
}

// check fails t (naming what) for anything new since the snapshot: a
// file, a VMM process or a loop device.
func (l *leftovers) check(t *testing.T, what string) {
	t.Helper()
	now := snapshotLeftovers(t, l.state)
	var added []string
	for p := range now.files {
		if !l.files[p] {
			added = append(added, p)
		}
	}
	slices.Sort(added)
	if len(added) > 0 {
		t.Errorf("%s left files in the daemon's state directory: %v", what, added)
	}
	if pids := vmmProcesses(l.state); len(pids) > 0 {
		t.Errorf("%s left VMM processes: %v", what, pids)
	}
	backing, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backing {
		if f, err := os.ReadFile(b); err == nil && strings.HasPrefix(string(f), l.state) {
			t.Errorf("%s left a loop device: %s -> %s", what, b, strings.TrimSpace(string(f)))
		}
	}
}
