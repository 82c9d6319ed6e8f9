package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
)

// The builder end to end on files: the out disk is a file mounted through
// a loop device, the image a static busybox. Skipped where there is no
// root, loop device, e2fsprogs or static busybox.

func e2eNeeds(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if err := exec.Command("losetup", "-f").Run(); err != nil {
		t.Skip("no free loop device (losetup -f)")
	}
	for _, tl := range []string{"mkfs.ext4", "e2fsck", "resize2fs", "tune2fs", "debugfs"} {
		if _, err := tool(tl); err != nil {
			t.Skip(err)
		}
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox")
	}
	if out, _ := exec.Command("file", "-L", bb).Output(); !bytes.Contains(out, []byte("statically linked")) {
		if out, err := exec.Command("ldd", bb).CombinedOutput(); err == nil && !bytes.Contains(out, []byte("not a dynamic")) {
			t.Skip("busybox is not static")
		}
	}
	return bb
}

// noLoopLeft checks that no loop device is left on file.
func noLoopLeft(t *testing.T, file string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, _ := exec.Command("losetup", "-j", file).Output()
		if len(bytes.TrimSpace(out)) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("a loop device is left on %s: %s", file, out)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// debugfsCat reads a file of the ext4 image without mounting it.
func debugfsCat(t *testing.T, img, p string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "cat "+p, img).Output()
	if err != nil {
		t.Fatalf("debugfs cat %s: %v", p, err)
	}
	return string(out)
}

func debugfsStat(t *testing.T, img, p string) string {
	out, _ := exec.Command("debugfs", "-R", "stat "+p, img).CombinedOutput()
	return string(out)
}

// busyboxLayer is a gzip layer of a static busybox image: its shell and
// a few applets, os-release, a file to white out, resolv.conf as a link;
// extra entries follow.
func busyboxLayer(t *testing.T, bb string, extra ...ent) []byte {
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	ents := []ent{
		{name: "bin/", typ: tar.TypeDir}, {name: "etc/", typ: tar.TypeDir}, {name: "run/", typ: tar.TypeDir},
		{name: "root/", typ: tar.TypeDir}, {name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
		{name: "bin/busybox", body: string(data), mode: 0o755},
	}
	for _, a := range []string{"sh", "cat", "ls", "test", "echo", "mkdir", "id", "grep", "env", "sleep"} {
		ents = append(ents, ent{name: "bin/" + a, typ: tar.TypeSymlink, link: "busybox"})
	}
	ents = append(ents,
		ent{name: "etc/os-release", body: "ID=busybox\n"},
		ent{name: "etc/gone", body: "whited out\n"},
		ent{name: "etc/resolv.conf", typ: tar.TypeSymlink, link: "../run/resolv.conf"})
	ents = append(ents, extra...)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(tarOf(t, ents...))
	w.Close()
	return gz.Bytes()
}

func TestBuildLayersEndToEnd(t *testing.T) {
	bb := e2eNeeds(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.Mkdir(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "keep"), []byte("keep"), 0o644)

	// Layer 2 (zstd): a file added, one whited out, a tar-slip.
	var l2 bytes.Buffer
	zw, _ := zstd.NewWriter(&l2)
	zw.Write(tarOf(t,
		ent{name: "etc/added", body: "added\n"},
		ent{name: "etc/.wh.gone"},
		ent{name: "opt/x", typ: tar.TypeSymlink, link: victim},
		ent{name: "opt/x/slipped", body: "slipped"},
	))
	zw.Close()

	p := testPlan(buildplan.ModeLayers)
	p.Config = buildplan.Config{Env: []string{"PATH=/bin", "FOO=from-image"}, WorkingDir: "/"}
	p.Layers = []buildplan.Layer{
		{File: "layers/0", MediaType: "application/vnd.oci.image.layer.v1.tar+gzip"},
		{File: "layers/1", MediaType: "application/vnd.oci.image.layer.v1.tar+zstd"},
	}
	p.Steps = []sandbox.RecipeStep{
		{Env: []string{"FOO=from-step", "BAR=1"}, WorkingDir: "/work"},
		{Run: `echo "ran $FOO $BAR $(pwd)" > /ran; test -c /dev/null && echo devnull >> /ran; cat /tmp/cellvm-inputs/inputs/files/hello >> /ran; cat /etc/resolv.conf > /dev/null && echo resolv >> /ran`},
		{CopyFrom: "files", CopyTo: "/"},
		{CopyFrom: "one.txt", CopyTo: "/srv/"},
		{Run: "test -f /var/tmp/../hello && echo through >> /ran; ls /tmp > /tmp-listing"},
	}
	l1 := busyboxLayer(t, bb)
	inputs := inputsTar(t, &p,
		file{name: "collect.py", data: []byte("raise SystemExit(1)")},
		file{name: "modules.txt", data: nil},
		file{name: "inputs/files/", typ: tar.TypeDir},
		file{name: "inputs/files/hello", data: []byte("hello\n")},
		file{name: "inputs/files/var/", typ: tar.TypeDir},
		file{name: "inputs/files/var/tmp", typ: tar.TypeSymlink, link: "../../../../../../.."},
		file{name: "inputs/files/bin/", typ: tar.TypeDir},
		file{name: "inputs/one.txt", data: []byte("one\n")},
		file{name: "layers/0", data: l1},
		file{name: "layers/1", data: l2.Bytes()},
	)
	out := filepath.Join(dir, "out.img")
	os.WriteFile(out, nil, 0o644)
	os.Truncate(out, p.DiskBytes)
	work := filepath.Join(dir, "work")
	var stdout bytes.Buffer
	code := Build(Options{Inputs: inputs, Out: out, Work: work}, &stdout)
	t.Logf("output:\n%s", stdout.String())
	noLoopLeft(t, out)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	for _, s := range []string{"step extract", "step run", "step files", "step manifest", "step mkfs", "step done"} {
		if !strings.Contains(stdout.String(), s+"\n") {
			t.Errorf("no %q line", s)
		}
	}
	prog, _ := os.ReadFile(filepath.Join(work, "progress"))
	if !strings.Contains(string(prog), "step done\n") {
		t.Errorf("progress file: %s", prog)
	}
	var res buildplan.Result
	data, err := os.ReadFile(filepath.Join(work, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(out)
	sb, err := readSuper(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.UUID != p.UUID || sb.uuid != p.UUID || res.SizeBytes != sb.size() || res.SizeBytes > fi.Size() || res.SizeBytes <= 0 {
		t.Errorf("result %+v, superblock %+v, file %d", res, sb, fi.Size())
	}
	if res.Python != "" || res.Config.WorkingDir != "/work" || strings.Join(res.Config.Env, " ") != "PATH=/bin FOO=from-step BAR=1" {
		t.Errorf("result config %+v python %q", res.Config, res.Python)
	}
	// No python3, node or bash in a busybox.
	if len(res.Languages) != 0 {
		t.Errorf("languages %v in a busybox", res.Languages)
	}
	var m manifest.Manifest
	if err := json.Unmarshal(res.Manifest, &m); err != nil || m.Python != "" {
		t.Errorf("manifest %s: %v", res.Manifest, err)
	}
	os.Truncate(out, res.SizeBytes) // as the host does
	if got := debugfsCat(t, out, "/ran"); got != "ran from-step 1 /work\ndevnull\nhello\nresolv\nthrough\n" {
		t.Errorf("/ran = %q", got)
	}
	for p, want := range map[string]string{"/etc/added": "added\n", "/hello": "hello\n", "/srv/one.txt": "one\n",
		filepath.Join(victim, "slipped"): "slipped", "/etc/os-release": "ID=busybox\n"} {
		if got := debugfsCat(t, out, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if st := debugfsStat(t, out, "/etc/gone"); !strings.Contains(st, "not found") {
		t.Errorf("/etc/gone is there: %s", st)
	}
	if st := debugfsStat(t, out, "/etc/resolv.conf"); !strings.Contains(st, "symlink") || !strings.Contains(st, "../run/resolv.conf") {
		t.Errorf("/etc/resolv.conf is not the image's link again: %s", st)
	}
	if st := debugfsStat(t, out, "/tmp/cellvm-inputs"); !strings.Contains(st, "not found") {
		t.Errorf("/tmp/cellvm-inputs is left: %s", st)
	}
	if st := debugfsStat(t, out, "/var/tmp"); !strings.Contains(st, "symlink") {
		t.Errorf("/var/tmp is no link: %s", st)
	}
	var cfg buildplan.Config
	if err := json.Unmarshal([]byte(debugfsCat(t, out, buildplan.ImageConfigFile)), &cfg); err != nil || cfg.WorkingDir != "/work" {
		t.Errorf("image config %+v: %v", cfg, err)
	}
	if mk := debugfsCat(t, out, buildplan.MarkerFile); !strings.HasPrefix(mk, "key "+testKey+"\nname img\nbase unknown\nbuilt ") {
		t.Errorf("marker %q", mk)
	}
	// Nothing outside: the victim as it was, the tar-slip inside.
	if ents, _ := os.ReadDir(victim); len(ents) != 1 {
		t.Errorf("the victim directory has %d entries", len(ents))
	}
	if _, err := os.Stat(filepath.Join(dir, "hello")); err == nil {
		t.Error("the copy wrote through var/tmp outside the image")
	}
	if ents, _ := os.ReadDir(filepath.Join(work, "root")); len(ents) != 0 {
		t.Errorf("the mount point is not empty: %d entries (still mounted?)", len(ents))
	}
}

func TestBuildDeriveEndToEnd(t *testing.T) {
	bb := e2eNeeds(t)
	dir := t.TempDir()
	// A base ext4 made from a tree, as a default image would be.
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{"bin", "etc", "tmp", "usr/sbin"} {
		os.MkdirAll(filepath.Join(tree, d), 0o755)
	}
	data, _ := os.ReadFile(bb)
	os.WriteFile(filepath.Join(tree, "bin/busybox"), data, 0o755)
	os.Symlink("busybox", filepath.Join(tree, "bin/sh"))
	os.Symlink("busybox", filepath.Join(tree, "bin/grep"))
	os.WriteFile(filepath.Join(tree, "etc/cellvm-image"), []byte("key basekey\nname default\n"), 0o644)
	os.WriteFile(filepath.Join(tree, "bin/python3"), []byte(fakePython), 0o755)
	os.WriteFile(filepath.Join(tree, "etc/cellvm-manifest.json"), []byte(`{"python":"3.11.2","modules":[{"import":"numpy","distribution":"numpy","version":"1"}],"distributions":{"numpy":"1"}}`), 0o644)
	base := filepath.Join(dir, "base.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-L", "base", "-d", tree, base, "16M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	out := filepath.Join(dir, "out.img")
	data, _ = os.ReadFile(base)
	os.WriteFile(out, data, 0o644)
	p := testPlan(buildplan.ModeDerive)
	os.Truncate(out, p.DiskBytes)
	p.Config = buildplan.Config{Env: []string{"PATH=/bin"}}
	p.Steps = []sandbox.RecipeStep{{Run: "echo derived > /etc/derived"}, {Apt: []string{"jq"}}}

	// The apt step fails: the image has no apt-get.
	inputs := inputsTar(t, &p, file{name: "collect.py", data: nil}, file{name: "modules.txt", data: nil})
	var stdout bytes.Buffer
	code := Build(Options{Inputs: inputs, Out: out, Work: filepath.Join(dir, "work1")}, &stdout)
	noLoopLeft(t, out)
	if code != ExitFailed || !strings.Contains(stdout.String(), "failed: apt\n") || !strings.Contains(stdout.String(), "no apt-get") {
		t.Fatalf("exit %d:\n%s", code, stdout.String())
	}

	os.WriteFile(out, data, 0o644)
	os.Truncate(out, p.DiskBytes)
	p.Steps = p.Steps[:1]
	inputs = inputsTar(t, &p, file{name: "collect.py", data: nil}, file{name: "modules.txt", data: nil})
	stdout.Reset()
	code = Build(Options{Inputs: inputs, Out: out, Work: filepath.Join(dir, "work2")}, &stdout)
	t.Logf("output:\n%s", stdout.String())
	noLoopLeft(t, out)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	sb, _ := readSuper(out)
	if sb.uuid != p.UUID {
		t.Errorf("uuid %s", sb.uuid)
	}
	if got := debugfsCat(t, out, "/etc/derived"); got != "derived\n" {
		t.Errorf("/etc/derived = %q", got)
	}
	if mk := debugfsCat(t, out, buildplan.MarkerFile); !strings.Contains(mk, "base basekey\n") {
		t.Errorf("marker %q", mk)
	}
	if rc := debugfsCat(t, out, "/etc/resolv.conf"); rc != "" {
		t.Errorf("resolv.conf = %q", rc)
	}
	if m := debugfsCat(t, out, buildplan.ManifestFile); !strings.Contains(m, `"x": "1"`) && !strings.Contains(m, `"x":"1"`) {
		t.Errorf("manifest %q", m)
	}

	// The base features numpy: a manifest without it fails the build.
	os.WriteFile(out, data, 0o644)
	os.Truncate(out, p.DiskBytes)
	inputs = inputsTar(t, &p, file{name: "collect.py", data: nil}, file{name: "modules.txt", data: []byte("numpy numpy\n")})
	stdout.Reset()
	code = Build(Options{Inputs: inputs, Out: out, Work: filepath.Join(dir, "work3")}, &stdout)
	noLoopLeft(t, out)
	if code != ExitFailed || !strings.Contains(stdout.String(), "failed: manifest\n") || !strings.Contains(stdout.String(), "numpy does not import") {
		t.Errorf("exit %d:\n%s", code, stdout.String())
	}
}

func TestBuildBadPlanFailsExtract(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := t.TempDir()
	inputs := inputsTar(t, nil, file{name: "plan.json", data: []byte(`{"version":1}`)})
	var stdout bytes.Buffer
	code := Build(Options{Inputs: inputs, Out: filepath.Join(dir, "nothing"), Work: filepath.Join(dir, "w")}, &stdout)
	if code != ExitFailed || !strings.HasPrefix(stdout.String(), "step extract\nfailed: extract\n") {
		t.Errorf("exit %d:\n%s", code, stdout.String())
	}
	if code := Main([]string{"-bogus"}); code != ExitUsage {
		t.Errorf("a bad flag: exit %d", code)
	}
}

// fakeNode is a node for the busybox image: its version, and TypeScript's
// (typescriptCheck) where the transpiler's file is in the image.
const fakeNode = `#!/bin/sh
case "$1" in
--version) echo v18.19.0 ;;
-e) test -f "$3" && echo 5.9.3 ;;
esac
`

// fakePython is a python3 for the busybox image: it answers the version,
// "runs" collect.py (failing on numpy in modules.txt, as collect.py does
// in an image without it) and logs pip's arguments.
const fakePython = `#!/bin/sh
case "$1" in
-c) echo 3.11.2 ;;
-B) if grep -q numpy "$3"; then echo "featured module numpy does not import" >&2; exit 1; fi
    echo '{"python":"3.11.2","modules":[],"distributions":{"x":"1"}}' > "$4" ;;
-m) echo "$* BSP=$PIP_BREAK_SYSTEM_PACKAGES PCF=$PIP_CONFIG_FILE" >> /pip-log
    if [ "$2" = "pip" ] && [ "$3" = "--version" ]; then echo "pip 23.0.1"; fi ;;
esac
`

func TestBuildPipAndManifest(t *testing.T) {
	bb := e2eNeeds(t)
	dir := t.TempDir()
	p := testPlan(buildplan.ModeLayers)
	p.Config = buildplan.Config{Env: []string{"PATH=/bin"}}
	p.Layers = []buildplan.Layer{{File: "layers/0", MediaType: "application/vnd.oci.image.layer.v1.tar+gzip"}}
	p.Steps = []sandbox.RecipeStep{{PipWheels: "wheels", Requirements: "req.txt", PipIndex: "http://idx.example:8080/simple/"}}
	inputs := inputsTar(t, &p,
		file{name: "collect.py", data: []byte("# collect")},
		file{name: "modules.txt", data: []byte("numpy numpy\n")},
		file{name: "inputs/wheels/b-1-py3-none-any.whl", data: []byte("b")},
		file{name: "inputs/wheels/a-1-py3-none-any.whl", data: []byte("a")},
		file{name: "inputs/wheels/notes.txt", data: []byte("n")},
		file{name: "inputs/req.txt", data: []byte("c\n")},
		file{name: "layers/0", data: busyboxLayer(t, bb,
			ent{name: "bin/python3", body: fakePython, mode: 0o755},
			ent{name: "bin/node", body: fakeNode, mode: 0o755},
			// A bash that is not one: no version, so no bash cells.
			ent{name: "bin/bash", body: "#!/bin/sh\necho GNU bash\n", mode: 0o755},
			ent{name: "opt/cellvm/node_modules/typescript/lib/typescript.js", body: "// ts"},
			ent{name: "usr/local/lib/python3.11/site-packages/", typ: tar.TypeDir})},
	)
	out := filepath.Join(dir, "out.img")
	os.WriteFile(out, nil, 0o644)
	os.Truncate(out, p.DiskBytes)
	var stdout bytes.Buffer
	code := Build(Options{Inputs: inputs, Out: out, Work: filepath.Join(dir, "work")}, &stdout)
	t.Logf("output:\n%s", stdout.String())
	noLoopLeft(t, out)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	in := "/tmp/cellvm-inputs/inputs/wheels"
	want := "-m pip --version BSP= PCF=/dev/null\n" +
		"-m pip install --no-cache-dir --disable-pip-version-check --no-warn-script-location --only-binary=:all: --progress-bar=off" +
		" --index-url http://idx.example:8080/simple/ --trusted-host idx.example:8080 --find-links " + in + " " + in + "/a-1-py3-none-any.whl " + in + "/b-1-py3-none-any.whl -r /tmp/cellvm-inputs/inputs/req.txt BSP=1 PCF=/dev/null\n" +
		"-m compileall -q /usr/local/lib/python3.11/site-packages BSP= PCF=/dev/null\n"
	if got := debugfsCat(t, out, "/pip-log"); got != want {
		t.Errorf("pip ran as\n%s\nwant\n%s", got, want)
	}
	var res buildplan.Result
	data, _ := os.ReadFile(filepath.Join(dir, "work", "result.json"))
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Python != "3.11.2" || string(res.Manifest) != `{"python":"3.11.2","modules":[],"distributions":{"x":"1"}}` {
		t.Errorf("result %s", data)
	}
	if !strings.Contains(stdout.String(), "the manifest lists no featured modules") {
		t.Error("no word of the featured modules left out")
	}
	if got, want := fmt.Sprint(res.Languages), "[{python 3.11.2} {javascript 18.19.0} {typescript 5.9.3}]"; got != want {
		t.Errorf("languages %s, want %s", got, want)
	}
}

// A hostile image: its /tmp, /proc and /dev are links out, its
// resolv.conf a directory, the inputs' mount point a link to a victim.
// The steps still run, and nothing outside the image changes.
// TestBuildHostileImageWithoutPIDNamespaces is TestBuildHostileImage on
// the path a guest kernel without PID namespaces takes (cellvm's own):
// the background sleeps are killed with the step's process group, and
// the build neither hangs on their output nor fails.
func TestBuildHostileImageWithoutPIDNamespaces(t *testing.T) {
	pidNamespaces = false
	defer func() { pidNamespaces = true }()
	start := time.Now()
	TestBuildHostileImage(t)
	if d := time.Since(start); d > 5*time.Minute {
		t.Errorf("the build took %v: a background process kept it waiting", d)
	}
}

func TestBuildHostileImage(t *testing.T) {
	bb := e2eNeeds(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.Mkdir(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "keep"), []byte("keep"), 0o644)
	p := testPlan(buildplan.ModeLayers)
	p.Config = buildplan.Config{Env: []string{"PATH=/bin"}}
	p.Layers = []buildplan.Layer{{File: "layers/0", MediaType: "application/vnd.oci.image.layer.v1.tar+gzip"}}
	p.Steps = []sandbox.RecipeStep{
		{Run: "cat /tmp/cellvm-inputs/inputs/x > /out; test -d /proc/self && echo proc >> /out; echo z > /dev/null && echo dev >> /out"},
		{CopyFrom: "x", CopyTo: "/tmp/sub/"},
		// What a step leaves running dies with it (its PID namespace).
		{Run: "sleep 1000 &"},
		{Run: "sleep 1000 </dev/null >/dev/null 2>&1 &"},
	}
	inputs := inputsTar(t, &p,
		file{name: "collect.py"}, file{name: "modules.txt"},
		file{name: "inputs/x", data: []byte("x\n")},
		file{name: "layers/0", data: busyboxLayer(t, bb,
			ent{name: "tmp", typ: tar.TypeSymlink, link: "../../../../../../.."},
			ent{name: "proc", typ: tar.TypeSymlink, link: victim},
			ent{name: "dev", typ: tar.TypeSymlink, link: "/../../../" + dir + "/devdir"},
			ent{name: "etc/resolv.conf/", typ: tar.TypeDir},
			ent{name: "etc/resolv.conf/x", body: "x"},
			ent{name: "cellvm-inputs", typ: tar.TypeSymlink, link: victim},
		)},
	)
	out := filepath.Join(dir, "out.img")
	os.WriteFile(out, nil, 0o644)
	os.Truncate(out, p.DiskBytes)
	var stdout bytes.Buffer
	start := time.Now()
	code := Build(Options{Inputs: inputs, Out: out, Work: filepath.Join(dir, "work")}, &stdout)
	t.Logf("output:\n%s", stdout.String())
	noLoopLeft(t, out)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("the build took %v: a step's background process was waited for", d)
	}
	if got := debugfsCat(t, out, "/out"); got != "x\nproc\ndev\n" {
		t.Errorf("/out = %q", got)
	}
	if got := debugfsCat(t, out, "/sub/x"); got != "x\n" {
		t.Errorf("/sub/x = %q", got)
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 1 {
		t.Errorf("the victim directory has %d entries", len(ents))
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		switch e.Name() {
		case "victim", "out.img", "work":
		default:
			t.Errorf("%s appeared outside the image", e.Name())
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mi, []byte(dir)) {
		t.Errorf("something is left mounted under %s", dir)
	}
}

const fakeAptGet = `#!/bin/sh
echo "apt-get $* DF=$DEBIAN_FRONTEND" >> /apt-log
cat /usr/sbin/policy-rc.d /etc/apt/sources.list >> /apt-log
`

// The apt step around a fake apt-get: the mirror replaces the sources,
// no daemon starts, the caches go (links removed, not followed), and the
// image's own policy-rc.d comes back.
func TestBuildAptStep(t *testing.T) {
	bb := e2eNeeds(t)
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	os.Mkdir(victim, 0o755)
	os.WriteFile(filepath.Join(victim, "keep"), []byte("keep"), 0o644)
	p := testPlan(buildplan.ModeLayers)
	p.Config = buildplan.Config{Env: []string{"PATH=/usr/bin:/bin"}}
	p.Layers = []buildplan.Layer{{File: "layers/0", MediaType: "application/vnd.oci.image.layer.v1.tar+gzip"}}
	p.Steps = []sandbox.RecipeStep{{Apt: []string{"jq", "curl=7.88"}, Mirror: "http://deb.example/debian"}}
	inputs := inputsTar(t, &p, file{name: "collect.py"}, file{name: "modules.txt"},
		file{name: "layers/0", data: busyboxLayer(t, bb,
			ent{name: "usr/bin/apt-get", body: fakeAptGet, mode: 0o755},
			ent{name: "usr/sbin/policy-rc.d", body: "#!/bin/sh\nexit 0\n", mode: 0o755},
			ent{name: "etc/os-release", body: "ID=debian\nVERSION_CODENAME=\"bookworm\"\n"},
			ent{name: "etc/apt/sources.list.d/debian.sources", body: "Types: deb\n"},
			ent{name: "var/lib/apt/lists/some_Packages", body: "p"},
			ent{name: "var/lib/apt/lists/evil", typ: tar.TypeSymlink, link: victim},
			ent{name: "var/cache/apt/archives/x.deb", body: "d"},
			ent{name: "var/cache/apt/archives/partial/", typ: tar.TypeDir},
			ent{name: "var/cache/apt/pkgcache.bin", body: "c"},
			ent{name: "var/log/apt", typ: tar.TypeSymlink, link: "/../../../../" + victim},
		)},
	)
	out := filepath.Join(dir, "out.img")
	os.WriteFile(out, nil, 0o644)
	os.Truncate(out, p.DiskBytes)
	var stdout bytes.Buffer
	code := Build(Options{Inputs: inputs, Out: out, Work: filepath.Join(dir, "work")}, &stdout)
	t.Logf("output:\n%s", stdout.String())
	noLoopLeft(t, out)
	if code != ExitOK {
		t.Fatalf("exit %d", code)
	}
	ours := "#!/bin/sh\nexit 101\ndeb http://deb.example/debian bookworm main\n"
	want := "apt-get -q -o Dpkg::Use-Pty=0 update DF=noninteractive\n" + ours +
		"apt-get -q -y -o Dpkg::Use-Pty=0 -o Dpkg::Progress-Fancy=0 -o APT::Install-Recommends=0 install jq curl=7.88 DF=noninteractive\n" + ours
	if got := debugfsCat(t, out, "/apt-log"); got != want {
		t.Errorf("apt-get ran as\n%s\nwant\n%s", got, want)
	}
	if got := debugfsCat(t, out, "/usr/sbin/policy-rc.d"); got != "#!/bin/sh\nexit 0\n" {
		t.Errorf("policy-rc.d = %q", got)
	}
	for _, gone := range []string{"/etc/apt/sources.list.d/debian.sources", "/var/lib/apt/lists/some_Packages", "/var/lib/apt/lists/evil",
		"/var/cache/apt/archives/x.deb", "/var/cache/apt/pkgcache.bin", "/var/log/apt", "/usr/sbin/policy-rc.d.cellvm-saved"} {
		if st := debugfsStat(t, out, gone); !strings.Contains(st, "not found") {
			t.Errorf("%s is left", gone)
		}
	}
	if st := debugfsStat(t, out, "/var/cache/apt/archives/partial"); strings.Contains(st, "not found") {
		t.Error("archives/partial went too")
	}
	if ents, _ := os.ReadDir(victim); len(ents) != 1 {
		t.Errorf("the victim directory has %d entries", len(ents))
	}
}
