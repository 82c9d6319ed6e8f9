package interp

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// The driver runs on an image's own python3: 3.8 or later, standard
// library only. These tests keep it so.

// TestDriverParsesAsPython38: the grammar of 3.8 (ast's feature_version)
// accepts driver.py and notebook.py: no match, no parenthesized context
// managers, no except*, no new f-string forms.
func TestDriverParsesAsPython38(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to parse with")
	}
	for _, f := range []string{"driver.py", "notebook.py"} {
		out, err := exec.Command(py, "-c", `import ast, sys
src = open(sys.argv[1], encoding="utf-8").read()
ast.parse(src, sys.argv[1], feature_version=(3, 8))
`, f).CombinedOutput()
		if err != nil {
			t.Errorf("%s does not parse as Python 3.8: %v\n%s", f, err, out)
		}
	}
}

// newerAPIs are standard-library names and idioms newer than Python 3.8,
// with the version that brought them. A line may use one when it says
// "# py38: ok" (it is guarded, e.g. by try/except).
var newerAPIs = []struct {
	re  *regexp.Regexp
	ver string
}{
	{regexp.MustCompile(`\.removeprefix\(|\.removesuffix\(`), "3.9"},
	{regexp.MustCompile(`\bfunctools\.cache\b|@cache\b`), "3.9"},
	{regexp.MustCompile(`\bmath\.lcm\b`), "3.9"},
	{regexp.MustCompile(`\bast\.unparse\b`), "3.9"},
	{regexp.MustCompile(`\basyncio\.to_thread\b`), "3.9"},
	{regexp.MustCompile(`\bzoneinfo\b|\bgraphlib\b`), "3.9"},
	{regexp.MustCompile(`\brandom\.randbytes\b|\bis_relative_to\(|\.readlink\(\)`), "3.9"},
	{regexp.MustCompile(`\bcompact\s*=`), "3.10"},
	{regexp.MustCompile(`\bzip\([^)]*strict\s*=`), "3.10"},
	{regexp.MustCompile(`\baiter\(|\banext\(|\bint\.bit_count\b|\.bit_count\(\)`), "3.10"},
	{regexp.MustCompile(`\bitertools\.pairwise\b|\bpairwise\(`), "3.10"},
	{regexp.MustCompile(`\bExceptionGroup\b|\bexcept\*|\badd_note\(|\btomllib\b|\basyncio\.TaskGroup\b|\basyncio\.timeout\(`), "3.11"},
	{regexp.MustCompile(`\bitertools\.batched\b|\bbatched\(`), "3.12"},
	{regexp.MustCompile(`\bsys\.monitoring\b|\btyping\.override\b`), "3.12"},
	// Builtin generics and unions in annotations are evaluated at def
	// time before 3.9 / 3.10.
	{regexp.MustCompile(`(:|->)\s*(list|dict|set|tuple|frozenset|type)\[`), "3.9"},
	{regexp.MustCompile(`(:|->)\s*[A-Za-z_.\[\]]+\s*\|\s*[A-Za-z_]`), "3.10"},
	// dict | dict and |=.
	{regexp.MustCompile(`\}\s*\|\s*\{|\bdict\([^)]*\)\s*\|`), "3.9"},
}

func TestDriverUsesNoAPINewerThan38(t *testing.T) {
	for _, f := range []string{"driver.py", "notebook.py"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "#")
			if strings.Contains(line, "# py38: ok") || strings.TrimSpace(code) == "" {
				continue
			}
			for _, api := range newerAPIs {
				if m := api.re.FindString(code); m != "" {
					t.Errorf("%s:%d uses %q (Python %s): %s", f, i+1, m, api.ver, strings.TrimSpace(line))
				}
			}
		}
	}
}

// compatPythons are the interpreters to run cells on besides the test
// python: CELLVM_TEST_PYTHONS (colon-separated), or pyenv's 3.x versions
// where this machine has them.
func compatPythons(t *testing.T) []string {
	if s := os.Getenv("CELLVM_TEST_PYTHONS"); s != "" {
		return filepath.SplitList(s)
	}
	home, _ := os.UserHomeDir()
	found, _ := filepath.Glob(filepath.Join(home, ".pyenv/versions/3.*/bin/python3"))
	sort.Strings(found)
	return found
}

func pythonVersion(t *testing.T, py string) (major, minor int, ok bool) {
	out, err := exec.Command(py, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])").Output()
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		return 0, 0, false
	}
	major, minor = atoiOr(f[0]), atoiOr(f[1])
	return major, minor, true
}

func atoiOr(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// TestDriverOnEveryPython runs the driver's core on each python found:
// 3.8 and later run cells (values, output, tracebacks that point at the
// cell, top-level await, display, interrupts keep state, notebook syntax
// degrades without IPython); older ones are the InterpreterTooOld result.
func TestDriverOnEveryPython(t *testing.T) {
	pys := compatPythons(t)
	if len(pys) == 0 {
		t.Skip("no other pythons (set CELLVM_TEST_PYTHONS, or install pyenv versions)")
	}
	for _, py := range pys {
		major, minor, ok := pythonVersion(t, py)
		if !ok {
			t.Logf("skipping %s: does not run", py)
			continue
		}
		t.Run(filepath.Base(filepath.Dir(filepath.Dir(py))), func(t *testing.T) {
			in := newTestInterp(t, func(c *Config) { c.Python = py })
			if major < 3 || (major == 3 && minor < 8) {
				res := run(t, in, "1")
				if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != ErrNameTooOld {
					t.Fatalf("Python %d.%d: %+v (error %+v)", major, minor, res, res.Error)
				}
				return
			}
			checkDriverCore(t, in)
		})
	}
}

func checkDriverCore(t *testing.T, in *Interp) {
	t.Helper()
	res := run(t, in, "x = 20\nprint('out')\nx + 22")
	expectOK(t, res)
	if mainText(t, res) != "42" || res.Stdout != "out\n" {
		t.Errorf("basic cell: %+v", res)
	}
	res = run(t, in, "def f():\n    return 1 / 0\nf()")
	if res.Error == nil || res.Error.Name != "ZeroDivisionError" || !strings.Contains(strings.Join(res.Error.Traceback, "\n"), `File "<cell-2>", line 2, in f`) {
		t.Errorf("traceback: %+v", res.Error)
	}
	res = run(t, in, "try:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('v') from e")
	if res.Error == nil || res.Error.Name != "ValueError" || !strings.Contains(strings.Join(res.Error.Traceback, "\n"), "KeyError") {
		t.Errorf("chained traceback: %+v", res.Error)
	}
	res = run(t, in, "import asyncio\nawait asyncio.sleep(0)\nx * 2")
	expectOK(t, res)
	if mainText(t, res) != "40" {
		t.Errorf("top-level await: %+v", res)
	}
	res = run(t, in, "class H:\n    def _repr_html_(self):\n        return '<b>h</b>'\ndisplay(H())\nH()")
	expectOK(t, res)
	if len(res.Results) != 2 || res.Results[1].Data["text/html"] != "<b>h</b>" {
		t.Errorf("display and _repr_html_: %+v", res.Results)
	}
	res, err := in.Run(context.Background(), "import time\nwhile True: time.sleep(0.01)", 500*time.Millisecond, nil)
	if err != nil || res.Status != cell.StatusTimeout || !res.StateKept {
		t.Errorf("timeout: %+v, %v", res, err)
	}
	res = run(t, in, "x")
	expectOK(t, res)
	if mainText(t, res) != "20" {
		t.Errorf("state after the timeout: %+v", res)
	}
	res = run(t, in, "!echo hi")
	withIPython := res.Status == cell.StatusOK && res.Stdout == "hi\n"
	withoutIPython := res.Error != nil && res.Error.Name == "SyntaxError" && strings.Contains(res.Stderr, "need IPython")
	if !withIPython && !withoutIPython {
		t.Errorf("notebook syntax: %+v (error %+v)", res, res.Error)
	}
}
