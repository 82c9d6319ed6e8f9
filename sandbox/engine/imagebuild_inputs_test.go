package engine

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/image/buildplan"
	"github.com/cellvm/cellvm/image/manifest"
	"github.com/cellvm/cellvm/sandbox"
)

// tarOf makes a tar archive of entries: "dir/" a directory, "l:name>target"
// a link, else a file with the content given.
func tarOf(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		name, body := e[0], e[1]
		switch {
		case strings.HasSuffix(name, "/"):
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755})
		case strings.HasPrefix(name, "l:"):
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name[2:], Linkname: body})
		default:
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o4755, Size: int64(len(body)), Uid: 1000, Uname: "me"})
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

type tarEntry struct {
	hdr  *tar.Header
	body string
}

func readTar(t *testing.T, b []byte) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		out = append(out, tarEntry{h, string(body)})
	}
}

func testKey(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestInputsDiskLayout: the plan first, then collect.py and modules.txt,
// then the recipe's inputs under inputs/, then the layers in plan order
// last, each of its descriptor's size, every header the host's.
func TestInputsDiskLayout(t *testing.T) {
	var spool bytes.Buffer
	in, err := readRecipeArchive(bytes.NewReader(tarOf(t, [2]string{"wheels/", ""}, [2]string{"wheels/a.whl", "wheel"}, [2]string{"l:cur", "wheels"})), &spool, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if in.bytes != 5 {
		t.Errorf("archive bytes %d, want 5", in.bytes)
	}
	layers := []string{"first layer", "second, longer layer"}
	key := testKey("x")
	plan := buildplan.Plan{Version: buildplan.Version, Name: "img", Key: key, UUID: buildplan.UUIDOf(key), Mode: buildplan.ModeLayers,
		DiskBytes: 64 << 20, Collect: collectFile, Modules: modulesFile}
	for i, l := range layers {
		plan.Layers = append(plan.Layers, buildplan.Layer{File: layerFile(i), MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: fmt.Sprintf("sha256:%064d", i), Size: int64(len(l))})
	}
	var out bytes.Buffer
	var done []int64
	err = writeInputs(&out, &plan, inputsSource{spool: &spool, openLayer: func(i int) (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(layers[i])), nil
	}, progress: func(d int64) { done = append(done, d) }})
	if err != nil {
		t.Fatal(err)
	}
	ents := readTar(t, out.Bytes())
	var names []string
	for _, e := range ents {
		names = append(names, e.hdr.Name)
		if e.hdr.Uid != 0 || e.hdr.Gid != 0 || e.hdr.Uname != "" || e.hdr.ModTime.Unix() != 0 {
			t.Errorf("%s: header %+v is not the host's own", e.hdr.Name, e.hdr)
		}
	}
	want := "plan.json collect.py modules.txt inputs/wheels/ inputs/wheels/a.whl inputs/cur layers/0000 layers/0001"
	if strings.Join(names, " ") != want {
		t.Fatalf("inputs disk entries %q, want %q", strings.Join(names, " "), want)
	}
	var got buildplan.Plan
	if err := json.Unmarshal([]byte(ents[0].body), &got); err != nil || got.Key != key || len(got.Layers) != 2 {
		t.Errorf("the plan entry: %+v, %v", got, err)
	}
	if ents[1].body != string(manifest.CollectScript()) || ents[2].body != string(manifest.ModulesList()) {
		t.Error("collect.py or modules.txt is not image/manifest's")
	}
	if ents[4].hdr.Mode != 0o4755 || ents[4].body != "wheel" || ents[5].hdr.Linkname != "wheels" {
		t.Errorf("the inputs' modes, content or links: %+v %+v", ents[4].hdr, ents[5].hdr)
	}
	for i, l := range layers {
		if e := ents[6+i]; e.hdr.Size != int64(len(l)) || e.body != l {
			t.Errorf("layer %d: %d bytes %q", i, e.hdr.Size, e.body)
		}
	}
	if len(done) != 2 || done[1] != int64(len(layers[0])+len(layers[1])) {
		t.Errorf("progress %v", done)
	}

	// A layer shorter or longer than its descriptor, or whose stream
	// fails its digest at the end, aborts.
	for name, open := range map[string]func(int) (io.ReadCloser, error){
		"short": func(i int) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(layers[i][1:])), nil },
		"long":  func(i int) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(layers[i] + "!")), nil },
		"digest": func(i int) (io.ReadCloser, error) {
			return io.NopCloser(io.MultiReader(strings.NewReader(layers[i]), errReader{})), nil
		},
		"open": func(i int) (io.ReadCloser, error) { return nil, errors.New("registry said 404") },
	} {
		if err := writeInputs(io.Discard, &plan, inputsSource{openLayer: open}); err == nil {
			t.Errorf("a %s layer: no error", name)
		}
	}
	bad := plan
	bad.UUID = "not-one"
	if err := writeInputs(io.Discard, &bad, inputsSource{}); err == nil {
		t.Error("an invalid plan was written")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("digest mismatch") }

func TestRecipeArchiveIsBoundedAndChecked(t *testing.T) {
	for name, c := range map[string]struct {
		archive []byte
		max     int64
		want    string
	}{
		"dotdot":       {tarOf(t, [2]string{"a/../../etc/x", "x"}), 1 << 20, `".."`},
		"absolute":     {tarOf(t, [2]string{"/etc/x", "x"}), 1 << 20, "absolute"},
		"too large":    {tarOf(t, [2]string{"a", "12345"}), 4, "more than"},
		"not a tar":    {[]byte(strings.Repeat("garbage ", 200)), 1 << 20, "not a tar"},
		"twice":        {tarOf(t, [2]string{"a", "1"}, [2]string{"a", "2"}), 1 << 20, "twice"},
		"under a file": {tarOf(t, [2]string{"a", "1"}, [2]string{"a/b", "2"}), 1 << 20, "not a directory"},
	} {
		_, err := readRecipeArchive(bytes.NewReader(c.archive), io.Discard, c.max)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeChar, Name: "dev", Devmajor: 1, Devminor: 3})
	tw.Close()
	if _, err := readRecipeArchive(&buf, io.Discard, 1<<20); err == nil || !strings.Contains(err.Error(), "device") {
		t.Errorf("a device: %v", err)
	}

	in, err := readRecipeArchive(bytes.NewReader(tarOf(t, [2]string{"w/a.whl", "x"}, [2]string{"req.txt", "numpy"}, [2]string{"tree/etc/f", "f"})), io.Discard, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	ok := []sandbox.RecipeStep{{PipWheels: "w", Requirements: "req.txt"}, {CopyFrom: "tree", CopyTo: "/"}, {CopyFrom: "./req.txt"}}
	if err := in.checkSteps(ok); err != nil {
		t.Errorf("steps naming what is there: %v", err)
	}
	for _, s := range []sandbox.RecipeStep{{PipWheels: "req.txt"}, {Requirements: "w", PipIndex: "https://pypi.org/simple"}, {CopyFrom: "nope"}} {
		if err := in.checkSteps([]sandbox.RecipeStep{s}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("step %+v: %v, want ErrInvalid", s, err)
		}
	}
}

func TestBuildKeys(t *testing.T) {
	d1, d2 := "sha256:"+testKey("a"), "sha256:"+testKey("b")
	if ociKey("web", d1) != ociKey("web", d1) {
		t.Fatal("the OCI key is not stable")
	}
	for name, k := range map[string]string{"digest": ociKey("web", d2), "name": ociKey("db", d1), "tenant": ociKey("acme~web", d1)} {
		if k == ociKey("web", d1) {
			t.Errorf("another %s, the same key", name)
		}
	}
	steps := []sandbox.RecipeStep{{Run: "true"}}
	base := recipeKey("web", "u1", 100, steps, []byte("a"))
	for name, k := range map[string]string{
		"base uuid": recipeKey("web", "u2", 100, steps, []byte("a")),
		"base size": recipeKey("web", "u1", 101, steps, []byte("a")),
		"steps":     recipeKey("web", "u1", 100, []sandbox.RecipeStep{{Run: "false"}}, []byte("a")),
		"archive":   recipeKey("web", "u1", 100, steps, []byte("b")),
		"name":      recipeKey("db", "u1", 100, steps, []byte("a")),
	} {
		if k == base {
			t.Errorf("another %s, the same key", name)
		}
	}
	if recipeKey("web", "u1", 100, steps, []byte("a")) != base || len(base) != 64 {
		t.Error("the recipe key is not stable, or not 64 hex digits")
	}
	// The archive's digest covers modes and contents.
	d := func(e ...[2]string) string {
		in, err := readRecipeArchive(bytes.NewReader(tarOf(t, e...)), io.Discard, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		return hex.EncodeToString(in.digest)
	}
	if d([2]string{"a", "1"}) == d([2]string{"a", "2"}) || d([2]string{"a", "1"}) != d([2]string{"a", "1"}) {
		t.Error("the archive digest does not follow the contents")
	}
}

func TestBuildNetworkIsTheStepsHostsOnly(t *testing.T) {
	for _, c := range []struct {
		steps []sandbox.RecipeStep
		want  string
	}{
		{[]sandbox.RecipeStep{{Run: "true"}, {CopyFrom: "x"}}, ""},
		{[]sandbox.RecipeStep{{Apt: []string{"curl"}}}, "deb.debian.org:80 deb.debian.org:443 security.debian.org:80 security.debian.org:443"},
		{[]sandbox.RecipeStep{{Apt: []string{"curl"}, Mirror: "http://mirror.example:8080/debian"}, {PipWheels: "w"}}, "mirror.example:8080"},
		{[]sandbox.RecipeStep{{Requirements: "r", PipIndex: "https://pypi.org/simple"}, {Requirements: "r", PipIndex: "https://pypi.org/simple"}}, "pypi.org:443 files.pythonhosted.org:443"},
		{[]sandbox.RecipeStep{{Requirements: "r", PipIndex: "http://10.1.2.3/simple"}}, "10.1.2.3:80"},
	} {
		got, err := buildNetwork(c.steps)
		if err != nil || strings.Join(got, " ") != c.want {
			t.Errorf("steps %+v: %q, %v, want %q", c.steps, got, err, c.want)
		}
		if _, err := buildPolicy(c.steps); err != nil {
			t.Errorf("steps %+v: policy: %v", c.steps, err)
		}
	}
	if _, err := buildNetwork([]sandbox.RecipeStep{{Requirements: "r", PipIndex: "http://[::1]/simple"}}); err == nil {
		t.Error("an IPv6 index was allowed")
	}
}
