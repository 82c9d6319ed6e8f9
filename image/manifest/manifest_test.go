package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
