package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/api"
	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/test/kvmtest"
)

// TestImagePulledAndImported, the key proof, through the CLI and
// the API of a jailed daemon: an image made here from Debian's packages
// (debootstrap minbase with python3, as python:slim is; rig-fixtures.sh)
// plus a second layer that adds a file, whites out another, makes a
// directory opaque, hard-links, chowns and carries a tar-slip, pushed to
// go-containerregistry's own registry, is pulled with `cellvm image pull`;
// its `docker save` tarball (another config, so another digest) is
// imported with `cellvm image import`. On each image a sandbox shows: a
// stateful cell under the image's own Python 3.11; `import numpy` is a
// ModuleNotFoundError result; the added file is there, the whited-out one
// gone, the opaque directory holds only layer 2's file, the hard link and
// the owner kept; /etc/os-release is the image's; the image's Env and
// WorkingDir apply to cells and exec, as a user other than root. The
// tar-slip wrote nothing on the host. GET /v1/images shows the source,
// ref, digest (the pushed manifest's, for the pull), Env and WorkingDir. A
// second pull of the same digest is a cache hit: no builder VM boots.
func TestImagePulledAndImported(t *testing.T) {
	kvmtest.Require(t)
	ctx := context.Background()
	if _, err := os.Lstat(slipVictim); err == nil {
		t.Fatalf("%s exists before the test, so the tar-slip's check cannot tell: remove it", slipVictim)
	}
	osRelease, err := os.ReadFile(fixture(t, slimOSReleaseFile))
	if err != nil {
		t.Fatal(err)
	}
	reg := startRegistry(t, nil)
	ref := reg + "/pyslim:test"
	l1 := slimLayer1(t)
	digest := pushImage(t, ref, slimImage(t, l1, nil))
	dir := t.TempDir()
	archive := saveImage(t, dir, "pyslim:imported", slimImage(t, l1, map[string]string{"org.cellvm.test": "imported"}))

	d := startDaemon(t, dir, "--network=false")
	defer func() { d.stop(t) }()
	c := api.NewClient(d.socket)

	start := time.Now()
	r := cellvmCLI(t, d.socket, buildTimeout, "image", "pull", ref, "--name", "pyslim", "--insecure")
	pullTime := time.Since(start)
	if r.code != 0 {
		t.Fatalf("cellvm image pull %s: exit %d\n%s", ref, r.code, r.stderr)
	}
	r = cellvmCLI(t, d.socket, buildTimeout, "image", "import", archive, "--name", "pyslim-imported")
	if r.code != 0 {
		t.Fatalf("cellvm image import %s: exit %d\n%s", archive, r.code, r.stderr)
	}

	pulled, ok := imageNamed(t, c, "pyslim")
	t.Logf("pulled: %+v", pulled)
	if !ok || pulled.Source != sandbox.ImageSourcePull || pulled.Ref != ref || pulled.Digest != digest {
		t.Errorf("GET /v1/images, the pulled image: %+v (listed %v); want source %q, ref %s, digest %s", pulled, ok, sandbox.ImageSourcePull, ref, digest)
	}
	imported, ok := imageNamed(t, c, "pyslim-imported")
	t.Logf("imported: %+v", imported)
	if !ok || imported.Source != sandbox.ImageSourceImport || !strings.HasPrefix(imported.Digest, "sha256:") || imported.Digest == digest {
		t.Errorf("GET /v1/images, the imported image: %+v (listed %v); want source %q and a sha256 digest of its own (not the pull's %s)", imported, ok, sandbox.ImageSourceImport, digest)
	}
	for _, im := range []sandbox.ImageInfo{pulled, imported} {
		if !slices.Contains(im.Env, slimFoo) || !slices.Contains(im.Env, slimPath) || im.WorkingDir != slimWorkDir || im.User != "" || im.SizeBytes <= 0 {
			t.Errorf("GET /v1/images, %s: env %q, working dir %q, user %q, size %d; want the image config's env (%s, %s), %s, no user, and a size",
				im.Name, im.Env, im.WorkingDir, im.User, im.SizeBytes, slimPath, slimFoo, slimWorkDir)
		}
		// python3 and bash (minbase's), no node: no JavaScript.
		if len(im.Languages) != 2 || im.Languages[0].Name != cell.Python || !strings.HasPrefix(im.Languages[0].Version, "3.11.") ||
			im.Languages[1].Name != cell.Bash || !strings.HasPrefix(im.Languages[1].Version, "5.2.") {
			t.Errorf("GET /v1/images, %s: languages %v; want python 3.11 and bash 5.2 (the builder finds no node)", im.Name, im.Languages)
		}
	}
	for _, name := range []string{"pyslim", "pyslim-imported"} {
		checkSlimSandbox(t, c, name, string(osRelease))
	}
	if _, err := os.Lstat(slipVictim); err == nil {
		t.Errorf("the tar-slip wrote %s on the host", slipVictim)
	}

	// The same digest again: a cache hit, made without a builder VM.
	var ev events
	start = time.Now()
	again, err := c.CreateImage(ctx, sandbox.ImageRequest{Name: "pyslim", Pull: ref, Insecure: true, Replace: true}, ev.add)
	t.Logf("the second pull: %.1f s (the first: %.1f s), steps %v: %+v, %v", time.Since(start).Seconds(), pullTime.Seconds(), ev.steps(), again, err)
	if err != nil || again.Digest != digest {
		t.Errorf("the second pull of %s: %+v, %v; want the same digest %s", ref, again, err, digest)
	}
	for _, step := range []string{sandbox.ImageStepBoot, sandbox.ImageStepExtract, sandbox.ImageStepMkfs} {
		if slices.Contains(ev.steps(), step) {
			t.Errorf("the second pull of the same digest ran step %q (steps %v): want a cache hit, no builder VM", step, ev.steps())
		}
	}
}

// slimProbe prints, as JSON, what the image's sandbox shows of its files,
// config and Python.
const slimProbe = `import json, os, sys
def st(p):
    try:
        s = os.lstat(p)
        return [s.st_ino, s.st_nlink, s.st_uid, s.st_gid]
    except OSError:
        return None
def read(p):
    try:
        return open(p).read()
    except OSError as e:
        return None
print(json.dumps({
    'exe': sys.executable,
    'added': read('/opt/added.txt'),
    'whited': os.path.lexists('/etc/issue.net'),
    'opaque': sorted(os.listdir('/etc/apt/apt.conf.d')) if os.path.isdir('/etc/apt/apt.conf.d') else None,
    'hard': [st('/opt/added.txt'), st('/opt/hard.txt')],
    'owned': st('/opt/owned.txt'),
    'os_release': read('/etc/os-release'),
    'foo': os.environ.get('FOO'),
    'path': os.environ.get('PATH'),
    'cwd': os.getcwd(),
    'uid': os.getuid(),
    'x_link': os.readlink('/opt/x') if os.path.islink('/opt/x') else None,
    'slip': [p for p in ('/tmp/victim/file', '/opt/x/file') if os.path.lexists(p)],
}))`

type slimFacts struct {
	Exe       string    `json:"exe"`
	Added     *string   `json:"added"`
	Whited    bool      `json:"whited"`
	Opaque    []string  `json:"opaque"`
	Hard      [][]int64 `json:"hard"`
	Owned     []int64   `json:"owned"`
	OSRelease *string   `json:"os_release"`
	Foo       *string   `json:"foo"`
	Path      string    `json:"path"`
	Cwd       string    `json:"cwd"`
	UID       int       `json:"uid"`
	XLink     *string   `json:"x_link"`
	Slip      []string  `json:"slip"`
}

// checkSlimSandbox runs one sandbox of the test image and checks it.
func checkSlimSandbox(t *testing.T, c *api.Client, image, osRelease string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	sb, err := c.Create(ctx, sandbox.Config{Image: image})
	if err != nil {
		t.Errorf("create a sandbox of %s: %v", image, err)
		return
	}
	defer func() {
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Error(err)
		}
	}()
	t.Logf("sandbox of %s up in %.1f s", image, time.Since(start).Seconds())
	start = time.Now()
	r := mustCell(t, c, sb.ID, "x = 1", 5*time.Minute)
	t.Logf("%s: its first cell (the interpreter's start) in %.1f s: %s %+v", image, time.Since(start).Seconds(), r.Status, r.Error)
	r = mustCell(t, c, sb.ID, "import sys\n(x + 1, sys.version_info[:2])", 2*time.Minute)
	if r.Status != cell.StatusOK || text(r) != "(2, (3, 11))" {
		t.Errorf("%s: x + 1 and the Python version after x = 1: %+v; want (2, (3, 11)): state kept, the image's Python 3.11", image, r)
	}
	r = mustCell(t, c, sb.ID, "import numpy", 2*time.Minute)
	if r.Status != cell.StatusError || r.Error == nil || r.Error.Name != "ModuleNotFoundError" {
		t.Errorf("%s: import numpy: %+v (error %+v); want a ModuleNotFoundError result", image, r, r.Error)
	}
	r = mustCell(t, c, sb.ID, slimProbe, 2*time.Minute)
	var f slimFacts
	if err := json.Unmarshal([]byte(r.Stdout), &f); r.Status != cell.StatusOK || err != nil {
		t.Errorf("%s: the probe cell: %+v, %v", image, r, err)
		return
	}
	t.Logf("%s: %s", image, r.Stdout)
	str := func(p *string) string {
		if p == nil {
			return "<none>"
		}
		return *p
	}
	if !strings.HasPrefix(f.Exe, "/usr/bin/python3") {
		t.Errorf("%s: the cells' interpreter is %s, want the image's /usr/bin/python3", image, f.Exe)
	}
	if str(f.Added) != addedText || f.Whited {
		t.Errorf("%s: %s holds %q (want %q), %s there: %v (want whited out)", image, addedFile, str(f.Added), addedText, whitedOut, f.Whited)
	}
	if !slices.Equal(f.Opaque, []string{opaqueKept}) {
		t.Errorf("%s: %s holds %v; want only layer 2's %s (an opaque whiteout hides layer 1's)", image, opaqueDir, f.Opaque, opaqueKept)
	}
	if len(f.Hard) != 2 || f.Hard[0] == nil || f.Hard[1] == nil || f.Hard[0][0] != f.Hard[1][0] || f.Hard[0][1] != 2 {
		t.Errorf("%s: /opt/added.txt and /opt/hard.txt (inode, links, uid, gid): %v; want one inode with 2 links", image, f.Hard)
	}
	if len(f.Owned) != 4 || f.Owned[2] != ownedUID || f.Owned[3] != ownedGID {
		t.Errorf("%s: /opt/owned.txt (inode, links, uid, gid): %v; want owner %d:%d kept", image, f.Owned, ownedUID, ownedGID)
	}
	if str(f.OSRelease) != osRelease {
		t.Errorf("%s: /etc/os-release is %q; want the image's:\n%s", image, str(f.OSRelease), osRelease)
	}
	if str(f.Foo) != "bar" || f.Cwd != slimWorkDir || f.Path != strings.TrimPrefix(slimPath, "PATH=") {
		t.Errorf("%s: FOO %q, cwd %s, PATH %s; want the image config's bar, %s and %s", image, str(f.Foo), f.Cwd, f.Path, slimWorkDir, slimPath)
	}
	if f.UID == 0 {
		t.Errorf("%s: cells run as root; an image that names no user gets a non-root default", image)
	}
	// The tar-slip stays inside the image: the file lies under the
	// image's own /tmp/victim (a sandbox's /tmp may hide it), under
	// /opt/x made a directory, or nowhere; never on the host (checked by
	// the caller) or in the builder VM's root (gone with the VM).
	t.Logf("%s: the tar-slip's link /opt/x -> %s, its file seen at %v", image, str(f.XLink), f.Slip)
	ex, err := c.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", `echo "$FOO"; pwd`}, Timeout: time.Minute})
	if err != nil || ex.ExitCode != 0 || ex.Stdout != "bar\n"+slimWorkDir+"\n" {
		t.Errorf("%s: exec of sh -c 'echo $FOO; pwd': %+v, %v; want bar and %s (the image config applies to exec)", image, ex, err, slimWorkDir)
	}
}

// TestImageWithoutPython, through the CLI and the API: an image with
// nothing but a static busybox (no python3, no /etc/os-release), imported
// from a `docker save` tarball, boots: exec runs its shell, files upload
// and download, and a cell is a clear error result naming the missing
// interpreter; the create does not fail.
func TestImageWithoutPython(t *testing.T) {
	kvmtest.Require(t)
	ctx := context.Background()
	dir := t.TempDir()
	archive := saveImage(t, dir, "busybox:rig", busyboxImage(t))
	d := startDaemon(t, dir, "--network=false")
	defer func() { d.stop(t) }()
	c := api.NewClient(d.socket)
	if r := cellvmCLI(t, d.socket, buildTimeout, "image", "import", archive, "--name", "bbox"); r.code != 0 {
		t.Fatalf("cellvm image import %s: exit %d\n%s", archive, r.code, r.stderr)
	}
	im, ok := imageNamed(t, c, "bbox")
	if !ok || im.Source != sandbox.ImageSourceImport || im.Python != "" || !slices.Equal(im.Env, []string{"PATH=/bin"}) || len(im.Languages) != 0 {
		t.Errorf("GET /v1/images, the busybox image: %+v (listed %v); want source import, no Python, no languages, env [PATH=/bin]", im, ok)
	}
	start := time.Now()
	sb, err := c.Create(ctx, sandbox.Config{Image: "bbox"})
	if err != nil {
		t.Fatalf("create a sandbox of an image without python3: %v; want it to boot", err)
	}
	t.Logf("sandbox of bbox up in %.1f s", time.Since(start).Seconds())
	defer func() {
		if err := c.Delete(ctx, sb.ID); err != nil {
			t.Error(err)
		}
	}()
	ex, err := c.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo hi"}, Timeout: time.Minute})
	if err != nil || ex.ExitCode != 0 || ex.Stdout != "hi\n" {
		t.Errorf("exec sh -c 'echo hi': %+v, %v; want hi", ex, err)
	}
	ex, err = c.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"cat", "/etc/os-release"}, Timeout: time.Minute})
	if err != nil || ex.ExitCode == 0 {
		t.Errorf("exec cat /etc/os-release: %+v, %v; want a failure (the image has none)", ex, err)
	}
	const body = "uploaded to a busybox image\n"
	if _, err := c.Upload(ctx, sb.ID, "/workspace/up.txt", strings.NewReader(body)); err != nil {
		t.Errorf("upload: %v", err)
	}
	ex, err = c.Exec(ctx, sb.ID, sandbox.ExecRequest{Argv: []string{"cat", "/workspace/up.txt"}, Timeout: time.Minute})
	if err != nil || ex.Stdout != body {
		t.Errorf("exec cat of the uploaded file: %+v, %v", ex, err)
	}
	var down bytes.Buffer
	if _, err := c.Download(ctx, sb.ID, "/workspace/up.txt", &down); err != nil || down.String() != body {
		t.Errorf("download: %q, %v", down.String(), err)
	}
	r, err := c.RunCell(ctx, sb.ID, sandbox.Cell{Code: "1 + 1", Timeout: 2 * time.Minute}, nil)
	t.Logf("a cell without python3: %+v (error %+v), %v", r, r.Error, err)
	if err != nil || r.Status != cell.StatusError || r.Error == nil || !strings.Contains(r.Error.Name+" "+r.Error.Value, "python3") {
		t.Errorf("a cell on an image without python3: %+v (error %+v), %v; want an error result naming the missing python3", r, r.Error, err)
	}
}
