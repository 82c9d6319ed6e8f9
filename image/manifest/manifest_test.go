package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/cell"
)

func TestDefaultManifestFeaturesTheKit(t *testing.T) {
	m := Default()
	want := map[string]string{"numpy": "numpy", "pandas": "pandas", "sklearn": "scikit-learn", "seaborn": "seaborn",
		"sympy": "sympy", "statsmodels": "statsmodels", "networkx": "networkx", "requests": "requests", "bs4": "beautifulsoup4",
		"lxml": "lxml", "openpyxl": "openpyxl", "plotly": "plotly", "pip": "pip", "matplotlib": "matplotlib", "scipy": "scipy"}
	for _, mod := range m.Modules {
		if d, ok := want[mod.Import]; ok && strings.EqualFold(d, mod.Distribution) {
			delete(want, mod.Import)
		}
	}
	if len(want) != 0 {
		t.Errorf("the default image's manifest lacks %v", want)
	}
	if !strings.HasPrefix(m.Python, "3.") {
		t.Errorf("python %q", m.Python)
	}
}

// The committed manifest's featured modules are modules.txt's, in order:
// a modules.txt edited without a rebuild is caught here.
func TestManifestFollowsModulesTxt(t *testing.T) {
	f, err := os.Open("modules.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var listed []Module
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			t.Fatalf("modules.txt: %q: want 'import distribution'", sc.Text())
		}
		listed = append(listed, Module{Import: fields[0], Distribution: fields[1]})
	}
	m := Default()
	if len(listed) != len(m.Modules) {
		t.Fatalf("modules.txt lists %d modules, manifest.json %d: rebuild the image (make image)", len(listed), len(m.Modules))
	}
	for i, l := range listed {
		if got := m.Modules[i]; got.Import != l.Import || !strings.EqualFold(got.Distribution, l.Distribution) {
			t.Errorf("module %d: modules.txt %s/%s, manifest.json %s/%s: rebuild the image (make image)", i, l.Import, l.Distribution, got.Import, got.Distribution)
		}
	}
}

// The committed manifest is the built image's: the copy next to it and the
// one inside it (read out of the ext4 with debugfs). Skipped before the
// image is built.
func TestManifestMatchesTheBuiltImage(t *testing.T) {
	build := os.Getenv("CELLVM_BUILD")
	if build == "" {
		build = filepath.Join("..", "..", "build")
	}
	image := filepath.Join(build, "rootfs.ext4")
	if _, err := os.Stat(image); errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s is not built (make image)", image)
	}
	beside, err := os.ReadFile(filepath.Join(build, BuildFile))
	if err != nil {
		t.Fatalf("the image is built but its manifest is not beside it: %v (make image writes both)", err)
	}
	if !bytes.Equal(beside, embedded) {
		t.Errorf("%s differs from the committed image/manifest/manifest.json: run make image, go generate ./clients, and commit both", BuildFile)
	}
	if _, err := exec.LookPath("debugfs"); err != nil {
		t.Skip("debugfs (e2fsprogs) is missing: cannot read the manifest inside the image")
	}
	var stderr bytes.Buffer
	cmd := exec.Command("debugfs", "-R", "cat "+PathInImage, image)
	cmd.Stderr = &stderr
	inside, err := cmd.Output()
	if err != nil || len(inside) == 0 {
		t.Fatalf("debugfs cat %s in %s: %v %s", PathInImage, image, err, stderr.String())
	}
	if !bytes.Equal(inside, embedded) {
		t.Errorf("%s inside %s differs from the committed manifest.json", PathInImage, image)
	}
}

func TestParseRejects(t *testing.T) {
	good := `{"python": "3.11.2", "modules": [{"import": "sklearn", "distribution": "scikit-learn", "version": "1.2.1"}], "distributions": {"scikit-learn": "1.2.1"}}`
	if _, err := Parse([]byte(good)); err != nil {
		t.Fatalf("good manifest: %v", err)
	}
	for name, b := range map[string]string{
		"not json":        `{`,
		"no python":       `{"modules": [{"import": "a", "distribution": "a", "version": "1"}], "distributions": {"a": "1"}}`,
		"no modules":      `{"python": "3.11.2", "modules": [], "distributions": {}}`,
		"empty version":   `{"python": "3.11.2", "modules": [{"import": "a", "distribution": "a", "version": ""}], "distributions": {"a": ""}}`,
		"comma in a name": `{"python": "3.11.2", "modules": [{"import": "a,b", "distribution": "a", "version": "1"}], "distributions": {"a": "1"}}`,
		"twice":           `{"python": "3.11.2", "modules": [{"import": "a", "distribution": "a", "version": "1"}, {"import": "a", "distribution": "a", "version": "1"}], "distributions": {"a": "1"}}`,
		"not installed":   `{"python": "3.11.2", "modules": [{"import": "a", "distribution": "a", "version": "1"}], "distributions": {}}`,
		"other version":   `{"python": "3.11.2", "modules": [{"import": "a", "distribution": "a", "version": "1"}], "distributions": {"a": "2"}}`,
		"huge":            `{"python": "` + strings.Repeat("x", maxSize) + `"}`,
	} {
		if _, err := Parse([]byte(b)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSummary(t *testing.T) {
	m := Manifest{Modules: []Module{{"numpy", "numpy", "1.24.2"}, {"sklearn", "scikit-learn", "1.2.1"}, {"PIL", "Pillow", "9.4.0"}, {"IPython", "ipython", "8.5.0"}}}
	if got, want := m.Summary(), "numpy 1.24.2, scikit-learn 1.2.1 (import sklearn), Pillow 9.4.0 (import PIL), ipython 8.5.0"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

func TestParseRejectsBadLanguages(t *testing.T) {
	const head = `{"python": "3.11.2", "modules": [{"import": "a", "distribution": "a", "version": "1"}], "distributions": {"a": "1"}, "languages": `
	good := head + `[{"name": "python", "version": "3.11.2"}, {"name": "javascript", "version": "18.19.0"}, {"name": "typescript", "version": "5.9.3"}, {"name": "bash", "version": "5.2.15"}]}`
	m, err := Parse([]byte(good))
	if err != nil {
		t.Fatalf("good manifest: %v", err)
	}
	if got, want := m.LanguageSummary(), "python 3.11.2, javascript (Node.js 18.19.0), typescript 5.9.3, bash 5.2.15"; got != want {
		t.Errorf("LanguageSummary() = %q, want %q", got, want)
	}
	for name, ls := range map[string]string{
		"unknown":       `[{"name": "cobol", "version": "1"}]`,
		"an alias":      `[{"name": "js", "version": "18.19.0"}]`,
		"upper case":    `[{"name": "Python", "version": "3.11.2"}]`,
		"twice":         `[{"name": "bash", "version": "5.2.15"}, {"name": "bash", "version": "5.2.15"}]`,
		"no version":    `[{"name": "bash"}]`,
		"odd version":   `[{"name": "bash", "version": "5.2; rm -rf /"}]`,
		"v prefix":      `[{"name": "javascript", "version": "v18.19.0"}]`,
		"long version":  `[{"name": "bash", "version": "5` + strings.Repeat("0", 64) + `"}]`,
		"too many":      `[{"name": "python", "version": "3"}, {"name": "javascript", "version": "1"}, {"name": "typescript", "version": "1"}, {"name": "bash", "version": "1"}, {"name": "python", "version": "3"}]`,
		"not a list":    `"python"`,
		"wrong element": `["python"]`,
	} {
		if _, err := Parse([]byte(head + ls + "}")); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// A manifest written before languages were recorded names none:
	// unknown, which parses.
	if m, err := Parse([]byte(head + "null}")); err != nil || len(m.Languages) != 0 || m.LanguageSummary() != "" {
		t.Errorf("no languages: %v %v", m.Languages, err)
	}
}

// The default image has every cell language, TypeScript at the version
// image/typescript.sh pins: a pin changed without a rebuild is caught here.
func TestDefaultManifestHasTheLanguages(t *testing.T) {
	m := Default()
	got := map[cell.Language]string{}
	for _, l := range m.Languages {
		got[l.Name] = l.Version
	}
	for _, l := range cell.Languages {
		if got[l] == "" {
			t.Errorf("the default image's manifest lacks %s (languages %v): rebuild the image (make image)", l, m.Languages)
		}
	}
	if got[cell.Python] != m.Python {
		t.Errorf("python %q among the languages, %q as the manifest's python", got[cell.Python], m.Python)
	}
	// The guest code targets bookworm's Node 18 (guestinit/interp).
	if !strings.HasPrefix(got[cell.JavaScript], "18.") {
		t.Errorf("node %q, want bookworm's 18.x", got[cell.JavaScript])
	}
	script, err := os.ReadFile(filepath.Join("..", "typescript.sh"))
	if err != nil {
		t.Fatal(err)
	}
	pin := regexp.MustCompile(`(?m)^version=([0-9.]+)$`).FindSubmatch(script)
	if pin == nil {
		t.Fatal("image/typescript.sh pins no version= line")
	}
	if got[cell.TypeScript] != string(pin[1]) {
		t.Errorf("typescript %q in the manifest, %s pinned in image/typescript.sh: rebuild the image (make image)", got[cell.TypeScript], pin[1])
	}
}

// collect.py lists a language only where its program is on the PATH and
// answers with a version.
func TestCollectLanguages(t *testing.T) {
	// The interpreter itself, not a shim (pyenv's) that needs the PATH.
	exe, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Skip("no python3 on this host")
	}
	python := strings.TrimSpace(string(exe))
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash on this host")
	}
	dir := t.TempDir()
	empty := filepath.Join(dir, "modules.txt")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	collect := func(t *testing.T, path, typescript string) map[cell.Language]string {
		t.Helper()
		out := filepath.Join(t.TempDir(), "m.json")
		cmd := exec.Command(python, "-B", "collect.py", empty, out)
		cmd.Env = []string{"PATH=" + path, "CELLVM_TYPESCRIPT=" + typescript, "HOME=" + dir}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("collect.py: %v\n%s", err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var m Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		if err := CheckLanguages(m.Languages); err != nil {
			t.Errorf("collect.py's languages %v: %v", m.Languages, err)
		}
		got := map[cell.Language]string{}
		for _, l := range m.Languages {
			got[l.Name] = l.Version
		}
		return got
	}
	bin := func(t *testing.T, files map[string]string) string {
		t.Helper()
		d := t.TempDir()
		if err := os.Symlink(bash, filepath.Join(d, "bash")); err != nil {
			t.Fatal(err)
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	t.Run("no node", func(t *testing.T) {
		got := collect(t, bin(t, nil), "/nonexistent/typescript.js")
		if got[cell.Python] == "" || !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(got[cell.Bash]) || len(got) != 2 {
			t.Errorf("languages %v, want python and bash alone", got)
		}
	})
	t.Run("node, no typescript", func(t *testing.T) {
		got := collect(t, bin(t, map[string]string{"node": "#!/bin/sh\necho v18.19.0\n"}), "/nonexistent/typescript.js")
		if got[cell.JavaScript] != "18.19.0" || got[cell.TypeScript] != "" {
			t.Errorf("languages %v, want javascript 18.19.0 without typescript", got)
		}
	})
	t.Run("a node that fails or says no version", func(t *testing.T) {
		for _, body := range []string{"#!/bin/sh\nexit 1\n", "#!/bin/sh\necho 'v18; rm -rf /'\n", "#!/bin/sh\n"} {
			if got := collect(t, bin(t, map[string]string{"node": body}), "/nonexistent/typescript.js"); got[cell.JavaScript] != "" {
				t.Errorf("node %q: languages %v, want no javascript", body, got)
			}
		}
	})
	t.Run("typescript", func(t *testing.T) {
		node, err := exec.LookPath("node")
		if err != nil {
			t.Skip("no node on this host")
		}
		ts, _ := filepath.Abs(filepath.Join("..", "..", "build", "typescript", "package", "lib", "typescript.js"))
		if _, err := os.Stat(ts); err != nil {
			t.Skipf("%s is not there (make typescript)", ts)
		}
		d := bin(t, nil)
		if err := os.Symlink(node, filepath.Join(d, "node")); err != nil {
			t.Fatal(err)
		}
		got := collect(t, d, ts)
		if got[cell.JavaScript] == "" || got[cell.TypeScript] == "" {
			t.Errorf("languages %v, want javascript and typescript", got)
		}
		// A file that is not the transpiler is no TypeScript.
		bogus := filepath.Join(t.TempDir(), "typescript.js")
		os.WriteFile(bogus, []byte("exports.version = '5.9.3'; exports.transpileModule = (s) => ({outputText: s})"), 0o644)
		if got := collect(t, d, bogus); got[cell.TypeScript] != "" {
			t.Errorf("a bogus transpiler: languages %v", got)
		}
	})
}
