package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/sandbox"
)

const testKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func testPlan(mode string) buildplan.Plan {
	return buildplan.Plan{Version: buildplan.Version, Name: "img", Key: testKey, UUID: buildplan.UUIDOf(testKey),
		Mode: mode, DiskBytes: 64 << 20, Collect: "collect.py", Modules: "modules.txt"}
}

// file is an entry of the inputs archive.
type file struct {
	name string
	data []byte
	typ  byte
	link string
}

func inputsTar(t testing.TB, p *buildplan.Plan, files ...file) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if p != nil {
		b, _ := json.Marshal(p)
		files = append([]file{{name: buildplan.PlanFile, data: b}}, files...)
	}
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg, ModTime: mtime, Linkname: f.link}
		if f.typ != 0 {
			h.Typeflag, h.Size = f.typ, 0
			if f.typ == tar.TypeDir {
				h.Mode = 0o755
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	tw.Close()
	path := filepath.Join(t.TempDir(), "inputs.tar")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParsePlan(t *testing.T) {
	p := testPlan(buildplan.ModeDerive)
	good, _ := json.Marshal(p)
	if _, err := parsePlan(good); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"unknown field": []byte(strings.Replace(string(good), `"version"`, `"bogus":1,"version"`, 1)),
		"trailing":      append(append([]byte(nil), good...), []byte(` {}`)...),
		"not json":      []byte("nope"),
		"bad uuid":      []byte(strings.Replace(string(good), p.UUID, "01234567-89ab-cdef-0123-456789abcdee", 1)),
		"too big":       bytes.Repeat([]byte(" "), buildplan.MaxPlanBytes+1),
	} {
		if _, err := parsePlan(b); err == nil {
			t.Errorf("%s: parsed", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestReadInputs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	p := testPlan(buildplan.ModeLayers)
	p.Layers = []buildplan.Layer{{File: "layers/0", MediaType: "application/vnd.oci.image.layer.v1.tar"}}
	layer := tarOf(t, ent{name: "etc/hostname", body: "h\n"})
	path := inputsTar(t, &p,
		file{name: "collect.py", data: []byte("print()")},
		file{name: "modules.txt", data: []byte("")},
		file{name: "inputs/files/", typ: tar.TypeDir},
		file{name: "inputs/files/a", data: []byte("A")},
		file{name: "inputs/files/link", typ: tar.TypeSymlink, link: "/etc/passwd"},
		file{name: "layers/0", data: layer},
	)
	in, err := openInputs(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.close()
	got, err := in.readPlan()
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "img" || len(got.Layers) != 1 {
		t.Fatalf("plan %+v", got)
	}
	dir := t.TempDir()
	r, _ := OpenRoot(dir)
	defer r.Close()
	if err := in.readSmall(&got, &Applier{Root: r, Inputs: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "inputs/files/a")); string(b) != "A" {
		t.Errorf("inputs/files/a = %q", b)
	}
	if l, _ := os.Readlink(filepath.Join(dir, "inputs/files/link")); l != "/etc/passwd" {
		t.Errorf("link %q", l)
	}
	img := t.TempDir()
	ir, _ := OpenRoot(img)
	defer ir.Close()
	pr := &progress{out: &bytes.Buffer{}}
	if err := in.applyLayers(&got, &Applier{Root: ir}, pr); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(img, "etc/hostname")); string(b) != "h\n" {
		t.Errorf("layer not applied: %q", b)
	}

	// Bad archives.
	bad := map[string]string{
		"no plan first":  inputsTar(t, nil, file{name: "collect.py", data: []byte("x")}),
		"empty":          inputsTar(t, nil),
		"stray entry":    inputsTar(t, &p, file{name: "etc/passwd", data: []byte("x")}),
		"climbing input": inputsTar(t, &p, file{name: "inputs/../../x", data: []byte("x")}),
		"layer missing":  inputsTar(t, &p, file{name: "collect.py", data: []byte("x")}),
		"after layers":   inputsTar(t, &p, file{name: "layers/0", data: layer}, file{name: "inputs/late", data: []byte("x")}),
		"device input":   inputsTar(t, &p, file{name: "inputs/dev", typ: tar.TypeChar}),
	}
	for name, path := range bad {
		in, err := openInputs(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := in.readPlan()
		if err == nil {
			d := t.TempDir()
			r, _ := OpenRoot(d)
			err = in.readSmall(&p, &Applier{Root: r, Inputs: true})
			if err == nil {
				i := t.TempDir()
				ir, _ := OpenRoot(i)
				err = in.applyLayers(&p, &Applier{Root: ir}, &progress{out: &bytes.Buffer{}})
				ir.Close()
			}
			r.Close()
		}
		in.close()
		if err == nil {
			t.Errorf("%s: read", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

func TestLayerDigest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	layer := tarOf(t, ent{name: "f", body: "x"})
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(layer)
	w.Close()
	sum := sha256.Sum256(gz.Bytes())
	l := buildplan.Layer{File: "l", MediaType: "application/vnd.oci.image.layer.v1.tar+gzip", Digest: "sha256:" + hex.EncodeToString(sum[:])}
	r, _ := OpenRoot(t.TempDir())
	defer r.Close()
	if err := applyLayer(bytes.NewReader(gz.Bytes()), l, &Applier{Root: r}); err != nil {
		t.Fatal(err)
	}
	l.Digest = "sha256:" + strings.Repeat("0", 64)
	if err := applyLayer(bytes.NewReader(gz.Bytes()), l, &Applier{Root: r}); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("a wrong digest: %v", err)
	}
}

func TestMergeConfig(t *testing.T) {
	c := buildplan.Config{Env: []string{"PATH=/usr/bin", "A=1"}, WorkingDir: "/", User: "app"}
	c = mergeConfig(c, sandbox.RecipeStep{Env: []string{"A=2", "B=x=y"}})
	c = mergeConfig(c, sandbox.RecipeStep{WorkingDir: "/srv/app/"})
	c = mergeConfig(c, sandbox.RecipeStep{User: "1000:1000"})
	want := buildplan.Config{Env: []string{"PATH=/usr/bin", "A=2", "B=x=y"}, WorkingDir: "/srv/app", User: "1000:1000"}
	if g, _ := json.Marshal(c); string(g) != string(mustJSON(want)) {
		t.Errorf("config %s, want %s", g, mustJSON(want))
	}
	b := &builder{config: buildplan.Config{Env: []string{"PATH=/opt/bin", "DEBIAN_FRONTEND=dialog"}}}
	env := b.stepEnv([]string{"X=1"})
	for _, w := range []string{"PATH=/opt/bin", "HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive", "PIP_CONFIG_FILE=/dev/null", "X=1"} {
		found := false
		for _, e := range env {
			found = found || e == w
		}
		if !found {
			t.Errorf("step env %q lacks %s", env, w)
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestResult(t *testing.T) {
	b := &builder{p: &progress{out: &bytes.Buffer{}}, plan: testPlan(buildplan.ModeLayers), python: "3.11.2",
		manifest: []byte("{\n  \"python\": \"3.11.2\"\n}\n"), config: buildplan.Config{User: "app"}}
	data, err := b.result(4096 * 100)
	if err != nil {
		t.Fatal(err)
	}
	var r buildplan.Result
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.SizeBytes != 409600 || r.UUID != b.plan.UUID || r.Python != "3.11.2" || string(r.Manifest) != `{"python":"3.11.2"}` || r.Config.User != "app" {
		t.Errorf("result %s", data)
	}
	b.manifest = []byte("not json")
	data, _ = b.result(1)
	if strings.Contains(string(data), "manifest") {
		t.Errorf("an invalid manifest in the result: %s", data)
	}
}

func TestMarker(t *testing.T) {
	b := &builder{plan: testPlan(buildplan.ModeDerive), baseKey: "abc"}
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	if got, want := b.marker(now), "key "+testKey+"\nname img\nbase abc\nbuilt 2024-01-02T03:04:05Z\n"; got != want {
		t.Errorf("marker %q, want %q", got, want)
	}
	b.plan.Base = "team\nx"
	if got := b.marker(now); !strings.Contains(got, "base team_x\n") {
		t.Errorf("marker %q", got)
	}
}

func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	w := &lineWriter{p: &progress{out: &out}}
	w.Write([]byte("one\ntw"))
	w.Write([]byte("o\rstep run\n" + strings.Repeat("x", maxLine+10) + "\nlast"))
	w.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 5 || lines[0] != "one" || lines[1] != "two" || lines[2] != "  step run" || len(lines[3]) != maxLine || lines[4] != "last" {
		t.Errorf("lines %q", lines)
	}
}

func TestParseSuper(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	f := filepath.Join(t.TempDir(), "fs")
	os.WriteFile(f, nil, 0o644)
	os.Truncate(f, 32<<20)
	uuid := buildplan.UUIDOf(testKey)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-b", "4096", "-U", uuid, f).CombinedOutput(); err != nil {
		t.Fatalf("mkfs: %v %s", err, out)
	}
	s, err := readSuper(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.uuid != uuid || s.blockSize != 4096 || s.size() != 32<<20 {
		t.Errorf("super %+v", s)
	}
	if _, err := parseSuper(make([]byte, 1024)); err == nil {
		t.Error("parsed zeros")
	}
}
