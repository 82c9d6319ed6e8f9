package derive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/image/store"
	"github.com/cellvm/cellvm/test/wheeltest"
)

// writeWheel writes a pure-Python wheel of dist (module mod, VALUE=value)
// into dir.
func writeWheel(t *testing.T, dir, dist, mod, version, value string) {
	t.Helper()
	w := wheeltest.Wheel{Dist: dist, Module: mod, Version: version, Init: fmt.Sprintf("VALUE = %q\n", value)}
	if _, err := w.WriteFile(dir); err != nil {
		t.Fatal(err)
	}
}

// serveIndex serves wheels as a PEP 503 index on the host's loopback,
// which the build's chroot shares, and returns its URL.
func serveIndex(t *testing.T, wheels ...wheeltest.Wheel) string {
	t.Helper()
	dir := t.TempDir()
	if err := wheeltest.WriteIndex(dir, wheels...); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.URL + "/simple/"
}

// baseImage is the default image `make image` built, or a skip.
func baseImage(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("image builds need root (loop mount, chroot); run the tests as root")
	}
	p := os.Getenv("CELLVM_ROOTFS")
	if p == "" {
		for dir, _ := os.Getwd(); ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p = filepath.Join(dir, "build", "rootfs.ext4")
				break
			}
			if dir == filepath.Dir(dir) {
				t.Fatal("no go.mod above the test's directory")
			}
		}
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no base image (%v): run 'make image'", err)
	}
	return p
}

// debugfsCat reads a file out of an ext4 image without mounting it.
func debugfsCat(t *testing.T, img, path string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+path, img).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", path, err)
	}
	return string(out)
}

// debugfsStat is debugfs's stat of path in img ("" when it is absent).
func debugfsStat(t *testing.T, img, path string) string {
	t.Helper()
	out, _ := exec.Command("debugfs", "-R", "stat "+path, img).CombinedOutput()
	if strings.Contains(string(out), "File not found") {
		return ""
	}
	return string(out)
}

// TestBuildFromWheelsRequirementsAndFiles builds an image on the default
// one with a wheel directory, a requirements file and a files tree, and
// reads the result: the packages in /usr/local for every user, the files
// owned by root, the manifest listing the new distributions, the marker.
// The same inputs again are a cache hit; a build whose pip step fails says
// so and leaves the image as it was; changed inputs rebuild it.
func TestBuildFromWheelsRequirementsAndFiles(t *testing.T) {
	base := baseImage(t)
	if _, err := exec.LookPath("debugfs"); err != nil {
		t.Skip("no debugfs (e2fsprogs) to read the built image")
	}
	dir := t.TempDir()
	wheels := filepath.Join(dir, "wheels")
	files := filepath.Join(dir, "files")
	for _, d := range []string{wheels, filepath.Join(files, "opt", "team")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeWheel(t, wheels, "cellvm-direct", "cellvm_direct", "1.0", "installed as a wheel")
	// A wheel only an index has, which the requirements file names.
	required := wheeltest.Wheel{Dist: "cellvm-required", Module: "cellvm_required", Version: "2.0", Init: "VALUE = 'installed by requirement'\n"}
	reqs := filepath.Join(dir, "requirements.txt")
	os.WriteFile(reqs, []byte("cellvm-required==2.0\n"), 0o644)
	os.WriteFile(filepath.Join(files, "opt", "team", "notes.txt"), []byte("the team's notes\n"), 0o640)
	// bin/ is a symbolic link to usr/bin in the (merged-/usr) image: a
	// file under the tree's bin/ lands in /usr/bin.
	os.MkdirAll(filepath.Join(files, "bin"), 0o755)
	os.WriteFile(filepath.Join(files, "bin", "cellvm-team-tool"), []byte("#!/bin/sh\necho tool\n"), 0o755)
	// An absolute symbolic link into the image: the rebuild below copies a
	// file through it, which must land in the image's /srv, not the host's.
	if err := os.Symlink("/srv", filepath.Join(files, "opt", "escape")); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Join(files, "opt", "team", "notes.txt"), 1234, 1234)

	images := filepath.Join(dir, "images")
	spec := Spec{Name: "team", ImagesDir: images, Base: base, PipWheels: wheels, Files: files}
	var log bytes.Buffer
	res, err := Build(context.Background(), spec, &log)
	if err != nil {
		t.Fatalf("build: %v\n%s", err, log.String())
	}
	if res.CacheHit {
		t.Fatal("first build reported a cache hit")
	}
	for _, s := range []string{"step extract", "step pip", "step files", "step manifest", "step mkfs", "step done"} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("progress lacks %q:\n%s", s, log.String())
		}
	}
	if strings.Contains(log.String(), "step apt") {
		t.Errorf("a build without --apt ran the apt step")
	}
	img := filepath.Join(images, "team", store.ImageFile)
	fi, err := os.Stat(img)
	if err != nil || fi.Mode().Perm() != 0o444 {
		t.Fatalf("image: %v, mode %v; want a read-only file", err, fi.Mode())
	}
	if got := debugfsCat(t, img, "/usr/local/lib/python3.11/dist-packages/cellvm_direct/__init__.py"); !strings.Contains(got, "installed as a wheel") {
		t.Errorf("the wheel's module in /usr/local: %q", got)
	}
	st := debugfsStat(t, img, "/opt/team/notes.txt")
	if !strings.Contains(st, "User:     0   Group:     0") || !strings.Contains(st, "Mode:  0640") {
		t.Errorf("--files' file is not root's with its mode kept:\n%s", st)
	}
	if st := debugfsStat(t, img, "/usr/bin/cellvm-team-tool"); !strings.Contains(st, "Mode:  0755") {
		t.Errorf("--files' bin/cellvm-team-tool is not /usr/bin/cellvm-team-tool, mode 0755, through the image's bin -> usr/bin:\n%s", st)
	}
	if st := debugfsStat(t, img, "/bin"); !strings.Contains(st, "Type: symlink") {
		t.Errorf("the image's /bin is no longer a symbolic link:\n%s", st)
	}
	marker := debugfsCat(t, img, "/etc/cellvm-image")
	if !strings.Contains(marker, "key "+res.Key) || !strings.Contains(marker, "name team") {
		t.Errorf("/etc/cellvm-image: %q", marker)
	}
	if got := debugfsCat(t, img, "/etc/resolv.conf"); got != "" {
		t.Errorf("the build left the host's resolv.conf in the image: %q", got)
	}
	mb, err := os.ReadFile(filepath.Join(images, "team", store.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	man, err := manifest.Parse(mb)
	if err != nil {
		t.Fatalf("manifest beside the image: %v", err)
	}
	if man.Distributions["cellvm-direct"] != "1.0" {
		t.Errorf("manifest's distributions lack cellvm-direct 1.0: %v", man.Distributions["cellvm-direct"])
	}
	if in := debugfsCat(t, img, manifest.PathInImage); in != string(mb) {
		t.Errorf("the manifest in the image differs from the one beside it")
	}
	rec, err := store.ReadRecord(filepath.Join(images, "team"))
	if err != nil || rec.Key != res.Key || rec.SizeBytes != fi.Size() {
		t.Errorf("build.json: %+v, %v", rec, err)
	}
	var ino1 uint64
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ino1 = st.Ino
	}

	// The same inputs: a cache hit, the same file.
	log.Reset()
	res2, err := Build(context.Background(), spec, &log)
	if err != nil || !res2.CacheHit || res2.Key != res.Key {
		t.Fatalf("second build: hit %v key %s, %v\n%s", res2.CacheHit, res2.Key, err, log.String())
	}
	if strings.Contains(log.String(), "step extract") {
		t.Errorf("a cache hit ran the build")
	}

	// A requirement pip cannot find: the pip step fails, the image stays.
	bad := spec
	bad.Requirements = filepath.Join(dir, "bad.txt")
	os.WriteFile(bad.Requirements, []byte("cellvm-nowhere==9.9\n"), 0o644)
	log.Reset()
	_, err = Build(context.Background(), bad, &log)
	var se *StepError
	if !errors.As(err, &se) || se.Step != "pip" || !strings.Contains(err.Error(), "cellvm-nowhere") {
		t.Fatalf("a build with a missing requirement: %v; want the pip step's failure naming it\n%s", err, log.String())
	}
	fi2, err := os.Stat(img)
	if err != nil {
		t.Fatalf("the failed build removed the image: %v", err)
	}
	if st, ok := fi2.Sys().(*syscall.Stat_t); ok && st.Ino != ino1 {
		t.Errorf("the failed build replaced the image")
	}
	if rec, _ := store.ReadRecord(filepath.Join(images, "team")); rec.Key != res.Key {
		t.Errorf("the failed build changed build.json")
	}
	if left, _ := filepath.Glob(filepath.Join(images, ".build-*")); len(left) != 0 {
		t.Errorf("the failed build left %v", left)
	}

	// Changed inputs (the base: the image itself; the requirement, from
	// a package index the build reaches; another file; a file under the
	// base's opt/escape -> /srv): a new image in place of the old.
	good := spec
	good.Base = img
	good.PipWheels = ""
	good.Requirements = reqs
	good.PipIndex = serveIndex(t, required)
	os.WriteFile(filepath.Join(files, "opt", "team", "notes.txt"), []byte("new notes\n"), 0o640)
	probe := fmt.Sprintf("cellvm-derive-probe-%d.txt", os.Getpid())
	os.Remove(filepath.Join(files, "opt", "escape"))
	os.MkdirAll(filepath.Join(files, "opt", "escape"), 0o755)
	os.WriteFile(filepath.Join(files, "opt", "escape", probe), []byte("in the image\n"), 0o644)
	t.Cleanup(func() { os.Remove(filepath.Join("/srv", probe)) })
	log.Reset()
	res3, err := Build(context.Background(), good, &log)
	if err != nil || res3.CacheHit || res3.Key == res.Key {
		t.Fatalf("rebuild: hit %v, %v\n%s", res3.CacheHit, err, log.String())
	}
	if got := debugfsCat(t, img, "/usr/local/lib/python3.11/dist-packages/cellvm_required/__init__.py"); !strings.Contains(got, "installed by requirement") {
		t.Errorf("the requirement's module: %q", got)
	}
	if got := debugfsCat(t, img, "/opt/team/notes.txt"); got != "new notes\n" {
		t.Errorf("the rebuilt image's file: %q", got)
	}
	if _, err := os.Lstat(filepath.Join("/srv", probe)); err == nil {
		t.Errorf("--files wrote /srv/%s on this host, through the base's symbolic link opt/escape -> /srv", probe)
	}
	if got := debugfsCat(t, img, "/srv/"+probe); got != "in the image\n" {
		t.Errorf("the file copied through the image's opt/escape -> /srv: %q in the image's /srv", got)
	}
	if got := debugfsCat(t, img, "/usr/local/lib/python3.11/dist-packages/cellvm_direct/__init__.py"); !strings.Contains(got, "installed as a wheel") {
		t.Errorf("the rebuild on the image lost what the image had: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(images, ".build-*")); len(left) != 0 {
		t.Errorf("the rebuild left %v (the old image's directory?)", left)
	}
	b, _ := json.Marshal(res3.Record)
	t.Logf("rebuild: %s", b)
}

// TestSpecChecks: bad input is refused before anything is made.
func TestSpecChecks(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.ext4")
	os.WriteFile(base, []byte("x"), 0o644)
	wheels := filepath.Join(dir, "wheels")
	os.MkdirAll(wheels, 0o755)
	images := filepath.Join(dir, "images")
	ok := Spec{Name: "a", ImagesDir: images, Base: base, Apt: []string{"jq"}}
	for _, c := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"empty name", func(s *Spec) { s.Name = "" }, "image name"},
		{"default", func(s *Spec) { s.Name = "default" }, "daemon's own image"},
		{"path", func(s *Spec) { s.Name = "../x" }, "image name"},
		{"apt option", func(s *Spec) { s.Apt = []string{"-oDebug::pkgProblemResolver=1"} }, "not a Debian package name"},
		{"apt shell", func(s *Spec) { s.Apt = []string{"jq;reboot"} }, "not a Debian package name"},
		{"nothing", func(s *Spec) { s.Apt = nil }, "nothing to build"},
		{"no base", func(s *Spec) { s.Base = filepath.Join(dir, "none") }, "base image"},
		{"mirror scheme", func(s *Spec) { s.Mirror = "ftp://x/debian" }, "--mirror"},
		{"mirror alone", func(s *Spec) { s.Apt = nil; s.Mirror = "http://x/debian"; s.Files = dir }, "--mirror without --apt"},
		{"empty wheels", func(s *Spec) { s.PipWheels = wheels }, "holds no *.whl"},
		{"wheels file", func(s *Spec) { s.PipWheels = base }, "not a directory"},
		{"requirements nowhere", func(s *Spec) { s.Requirements = base }, "needs somewhere to find them"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := ok
			c.edit(&s)
			_, err := Build(context.Background(), s, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
			if _, err := os.Stat(images); err == nil {
				t.Errorf("a refused build made %s", images)
			}
		})
	}
	// Not an ext4: refused by its superblock.
	_, err := Build(context.Background(), ok, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "superblock") {
		t.Fatalf("a base that is no ext4: %v", err)
	}
	// A device node in --files is refused while hashing.
	files := filepath.Join(dir, "files")
	os.MkdirAll(files, 0o755)
	if err := syscall.Mkfifo(filepath.Join(files, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	if err := treeDigest("--files", files, h); err == nil || !strings.Contains(err.Error(), "only files, directories and symbolic links") {
		t.Fatalf("a pipe in --files: %v", err)
	}
}

// TestKeyCoversTheInputs: every input changes the key; the order of
// packages does not.
func TestKeyCoversTheInputs(t *testing.T) {
	dir := t.TempDir()
	files := filepath.Join(dir, "files")
	os.MkdirAll(files, 0o755)
	os.WriteFile(filepath.Join(files, "a"), []byte("1"), 0o644)
	s := Spec{Name: "a", Apt: []string{"jq", "tree"}, Files: files}
	k := func(s Spec, uuid string) string {
		key, err := s.key(uuid, 100)
		if err != nil {
			t.Fatal(err)
		}
		return key
	}
	k0 := k(s, "u1")
	r := s
	r.Apt = []string{"tree", "jq"}
	if k(r, "u1") != k0 {
		t.Error("the packages' order changed the key")
	}
	seen := map[string]string{k0: "start"}
	for name, key := range map[string]string{
		"base":   k(s, "u2"),
		"name":   k(Spec{Name: "b", Apt: s.Apt, Files: files}, "u1"),
		"apt":    k(Spec{Name: "a", Apt: []string{"jq"}, Files: files}, "u1"),
		"mirror": k(Spec{Name: "a", Apt: s.Apt, Files: files, Mirror: "http://m/debian"}, "u1"),
	} {
		if prev, dup := seen[key]; dup {
			t.Errorf("%s gives the key of %s", name, prev)
		}
		seen[key] = name
	}
	os.WriteFile(filepath.Join(files, "a"), []byte("2"), 0o644)
	if k(s, "u1") == k0 {
		t.Error("a file's content did not change the key")
	}
	os.Chmod(filepath.Join(files, "a"), 0o600)
	k1 := k(s, "u1")
	os.Chmod(filepath.Join(files, "a"), 0o644)
	if k1 == k(s, "u1") {
		t.Error("a file's mode did not change the key")
	}
}
