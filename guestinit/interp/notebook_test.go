package interp

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// transformCells runs notebook.py's transform_cell on each cell under the
// test python, without an interpreter or a VM, and returns its answers
// ("" for None) and whether the IPython package got imported.
func transformCells(t *testing.T, cells []string) (out []string, importedIPython bool) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, notebookFile), notebookSource, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("nb", sys.argv[1])
nb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(nb)
out = [nb.transform_cell(c) or "" for c in json.load(sys.stdin)]
json.dump({"out": out, "ipython": "IPython" in sys.modules}, sys.stdout)
`
	in, _ := json.Marshal(cells)
	cmd := exec.Command(testPython(t), "-c", script, filepath.Join(dir, notebookFile))
	cmd.Stdin = strings.NewReader(string(in))
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("transform: %v %s", err, errText(err))
	}
	var got struct {
		Out     []string
		IPython bool
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("transform output %q: %v", b, err)
	}
	return got.Out, got.IPython
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// TestNotebookTransform: IPython's transformers turn shell escapes and
// magics into calls on get_ipython(), keep the cell's line numbers (lines
// joined by a backslash and blank lines before a cell magic are padded
// back), leave plain Python, strings and invalid Python alone, and do not
// import the IPython package.
func TestNotebookTransform(t *testing.T) {
	cases := []struct{ in, want string }{
		{"!echo hi", "get_ipython().system('echo hi')\n"},
		{"files = !ls -1\nlen(files)", "files = get_ipython().getoutput('ls -1')\nlen(files)\n"},
		{"%time f(1)", "get_ipython().run_line_magic('time', 'f(1)')\n"},
		{"%pip install x==1.0", "get_ipython().run_line_magic('pip', 'install x==1.0')\n"},
		{"for i in range(2):\n    !echo $i", "for i in range(2):\n    get_ipython().system('echo $i')\n"},
		{"%%bash\necho a\necho b", "get_ipython().run_cell_magic('bash', '', 'echo a\\necho b\\n')\n"},
		// Blank lines before a cell magic stay, so its body keeps its lines.
		{"\n\n%%time\nx = 1", "\n\nget_ipython().run_cell_magic('time', '', 'x = 1\\n')\n"},
		// A command continued over two lines leaves a blank line behind.
		{"!echo a \\\n  b\nx = 1", "get_ipython().system('echo a    b')\n\nx = 1\n"},
		// A '!' inside a string is not a command.
		{"s = '''\n!not\n'''\n!yes", "s = '''\n!not\n'''\nget_ipython().system('yes')\n"},
		// Nothing to transform: None.
		{"x = 1\ny = x % 2", ""},
		{"x = (1,\n!ls", ""},
	}
	var in []string
	for _, c := range cases {
		in = append(in, c.in)
	}
	out, ipython := transformCells(t, in)
	for i, c := range cases {
		if out[i] != c.want {
			t.Errorf("transform(%q) = %q, want %q", c.in, out[i], c.want)
		}
		if c.want != "" && !strings.Contains(c.in, "%%") && strings.Count(out[i], "\n") < strings.Count(c.in, "\n") {
			t.Errorf("transform(%q) lost lines: %q", c.in, out[i])
		}
	}
	if ipython {
		t.Error("transforming imported the IPython package (only inputtransformer2 is needed)")
	}
}

// TestPlainCellsDoNotLoadNotebookSupport: a plain cell, and one that is
// only invalid Python, load neither the notebook module nor IPython's
// transformer, and get_ipython stays undefined, as before.
func TestPlainCellsDoNotLoadNotebookSupport(t *testing.T) {
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 10 % 3\ns = '!not a command'"))
	if res := run(t, in, "y = (1,"); res.Error == nil || res.Error.Name != "SyntaxError" {
		t.Fatalf("syntax error: %+v", res)
	}
	res := run(t, in, "import sys\n[m for m in sys.modules if 'cellvm' in m or m.startswith('IPython')], 'get_ipython' in globals()")
	expectOK(t, res)
	if got := mainText(t, res); got != "([], False)" {
		t.Errorf("after plain cells: %s, want ([], False)", got)
	}
	expectOK(t, run(t, in, "!true"))
	res = run(t, in, "sorted(m for m in sys.modules if 'cellvm' in m), 'IPython' in sys.modules")
	if got := mainText(t, res); got != "(['_cellvm_inputtransformer2', '_cellvm_notebook'], False)" {
		t.Errorf("after a shell escape: %s", got)
	}
}

// TestShellEscapes: !cmd runs in a shell with the cell's output streams,
// sets _exit_code without failing the cell (as in Jupyter), expands {expr}
// and $name from the namespace, and x = !cmd captures the lines.
func TestShellEscapes(t *testing.T) {
	in := newTestInterp(t, nil)
	res := run(t, in, "print('py')\n!echo hi\n!echo err >&2\nprint('end')")
	expectOK(t, res)
	if res.Stdout != "py\nhi\nend\n" || res.Stderr != "err\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if res.MainResult() != nil {
		t.Errorf("a shell escape gave a main result: %+v", res.Results)
	}
	res = run(t, in, "!exit 3\n_exit_code")
	expectOK(t, res)
	if got := mainText(t, res); got != "3" {
		t.Errorf("_exit_code = %s, want 3", got)
	}
	res = run(t, in, "name = 'w'\nn = 2\n!echo {name} $n {n * 3} ${HOME:+home} $$")
	expectOK(t, res)
	if res.Stdout != "w 2 6 home $\n" {
		t.Errorf("expanded command printed %q", res.Stdout)
	}
	res = run(t, in, "lines = !printf 'a\\nb\\n'\nlines, lines.s")
	expectOK(t, res)
	if got := mainText(t, res); got != "(['a', 'b'], 'a b')" {
		t.Errorf("captured %s", got)
	}
	// A cell that redirected sys.stdout gets the command's output there.
	res = run(t, in, "import contextlib, io\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    !echo captured\nbuf.getvalue()")
	expectOK(t, res)
	if got := mainText(t, res); got != `'captured\n'` || res.Stdout != "" {
		t.Errorf("redirected: buffer %s, stdout %q", got, res.Stdout)
	}
	// Inside a block, and through get_ipython() directly.
	res = run(t, in, "for i in range(2):\n    !echo $i\nget_ipython().system('echo direct')")
	expectOK(t, res)
	if res.Stdout != "0\n1\ndirect\n" {
		t.Errorf("stdout %q", res.Stdout)
	}
}

// TestMagics: the supported line and cell magics, and an unknown magic is
// an error result that names it and keeps the state.
func TestMagics(t *testing.T) {
	in := newTestInterp(t, func(c *Config) { c.Dir = t.TempDir() })
	res := run(t, in, "%time sum(range(10))")
	expectOK(t, res)
	if got := mainText(t, res); got != "45" {
		t.Errorf("%%time value %s, want 45", got)
	}
	if !regexp.MustCompile(`^CPU times: user .+, sys: .+, total: .+\nWall time: .+\n$`).MatchString(res.Stdout) {
		t.Errorf("%%time printed %q", res.Stdout)
	}
	res = run(t, in, "%%time\nv = 6 * 7\nv")
	expectOK(t, res)
	if got := mainText(t, res); got != "42" || !strings.Contains(res.Stdout, "Wall time") {
		t.Errorf("%%%%time: main %s stdout %q", got, res.Stdout)
	}
	res = run(t, in, "%timeit -n 3 -r 2 v + 1")
	expectOK(t, res)
	if !strings.Contains(res.Stdout, "per loop (mean ± std. dev. of 2 runs, 3 loops each)") {
		t.Errorf("%%timeit printed %q", res.Stdout)
	}
	res = run(t, in, "%%bash\nx=$((v + 1))\necho \"$x ${BASH_VERSION:+bash}\"")
	expectOK(t, res)
	if res.Stdout != "1 bash\n" { // the body is bash's, not Python's: v is unset there
		t.Errorf("%%%%bash printed %q", res.Stdout)
	}
	res = run(t, in, "%%sh\necho out\nexit 4")
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "CalledProcessError" || res.Stdout != "out\n" {
		t.Errorf("failing %%%%sh: %+v", res)
	}
	res = run(t, in, "%%writefile notes.txt\nline one\n")
	expectOK(t, res)
	res = run(t, in, "import os\nos.mkdir('sub')\n%cd sub\nprint(open('../notes.txt').read(), end='')\n%env GREETING=hello\n(os.path.basename(os.getcwd()), os.environ['GREETING'])")
	expectOK(t, res)
	if got := mainText(t, res); got != "('sub', 'hello')" || !strings.Contains(res.Stdout, "line one\n") || !strings.Contains(res.Stdout, "env: GREETING=hello") {
		t.Errorf("%%cd/%%env: main %s stdout %q", got, res.Stdout)
	}
	expectOK(t, run(t, in, "%matplotlib inline"))
	res = run(t, in, "%%html\n<b>bold</b>")
	expectOK(t, res)
	if len(res.Results) != 1 || res.Results[0].Data[cell.MIMEHTML] != "<b>bold</b>\n" {
		t.Errorf("%%%%html results %+v", res.Results)
	}

	res = run(t, in, "x = 'kept'\n%nosuch arg")
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "UsageError" ||
		!strings.Contains(res.Error.Value, "`%nosuch` not found") || !strings.Contains(res.Error.Value, "%pip") {
		t.Fatalf("unknown magic: %+v", res)
	}
	if tb := strings.Join(res.Error.Traceback, "\n"); !strings.Contains(tb, "\"<cell-"+strconv.Itoa(res.ExecutionCount)+">\", line 2") || !strings.Contains(tb, "%nosuch arg") || strings.Contains(tb, notebookFile) {
		t.Errorf("unknown magic's traceback:\n%s", tb)
	}
	res = run(t, in, "%%nosuch\nbody")
	if res.Error == nil || res.Error.Name != "UsageError" || !strings.Contains(res.Error.Value, "%%nosuch") {
		t.Errorf("unknown cell magic: %+v", res.Error)
	}
	if got := mainText(t, run(t, in, "x")); got != "'kept'" {
		t.Errorf("x = %s after an unknown magic", got)
	}
}

// TestNotebookErrorsKeepLines: syntax errors in a cell with notebook
// syntax stay SyntaxError results, and tracebacks (runtime and syntax)
// name the user's line numbers and lines.
func TestNotebookErrorsKeepLines(t *testing.T) {
	in := newTestInterp(t, nil)
	for _, tc := range []struct {
		code, name string
		line       int
		text       string
	}{
		// A Python syntax error next to a shell escape.
		{"!echo hi\nx = (1,\ny = 2", "SyntaxError", 2, "x = (1,"},
		// In the argument of %time.
		{"a = 1\n%time b = (", "SyntaxError", 2, ""},
		// In a %%time body: the body starts on line 2.
		{"%%time\nok = 1\nbad bad", "SyntaxError", 3, "bad bad"},
		// A runtime error after a command joined from two lines.
		{"!echo a \\\n  b\n\ndef f():\n    return 1 / 0\nf()", "ZeroDivisionError", 5, "return 1 / 0"},
		// Blank lines before a cell magic.
		{"\n\n%%time\nz = 1\nz / 0", "ZeroDivisionError", 5, "z / 0"},
	} {
		res := run(t, in, tc.code)
		if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != tc.name {
			t.Errorf("%q: want %s, got %+v (stdout %q)", tc.code, tc.name, res.Error, res.Stdout)
			continue
		}
		tb := strings.Join(res.Error.Traceback, "\n")
		want := "\"<cell-" + strconv.Itoa(res.ExecutionCount) + ">\", line " + strconv.Itoa(tc.line)
		if !strings.Contains(tb, want) || !strings.Contains(tb, tc.text) {
			t.Errorf("%q: traceback lacks %q / %q:\n%s", tc.code, want, tc.text, tb)
		}
		if strings.Contains(tb, "cellvm_") || strings.Contains(tb, "get_ipython") {
			t.Errorf("%q: traceback shows cellvm frames or generated code:\n%s", tc.code, tb)
		}
	}
}

// TestShellEscapeTimeoutKeepsState: a long command times out like any
// cell: it is killed with the cell, the result is a timeout, and the
// interpreter keeps its state.
func TestShellEscapeTimeoutKeepsState(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	expectOK(t, run(t, in, "x = 'survives'"))
	res := runT(t, in, "!echo $$$$; exec sleep 100" /* $$ is a $ */, time.Second)
	if res.Status != cell.StatusTimeout || res.KilledBy != cell.KilledByTimeout || !res.StateKept {
		t.Fatalf("got status %q killed_by %q state_kept %v (%+v)", res.Status, res.KilledBy, res.StateKept, res.Error)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("stdout %q is not the command's pid", res.Stdout)
	}
	waitGone(t, pid, 10*time.Second)
	if got := mainText(t, run(t, in, "x")); got != "'survives'" {
		t.Errorf("x = %s after the timeout", got)
	}
}

// pythonWithoutPip makes a venv of the test python without pip (and without
// the system's site-packages), and a directory that, on PYTHONPATH, gives
// it IPython again.
func pythonWithoutPip(t *testing.T) (python, ipythonPath string) {
	t.Helper()
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	if b, err := exec.Command(testPython(t), "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("cannot make a venv: %v %s", err, b)
	}
	b, err := exec.Command(testPython(t), "-c", "import IPython, os; print(os.path.dirname(IPython.__file__))").Output()
	if err != nil {
		t.Skipf("no IPython in %s: %v", testPython(t), err)
	}
	ipythonPath = filepath.Join(dir, "site")
	os.Mkdir(ipythonPath, 0o755)
	if err := os.Symlink(strings.TrimSpace(string(b)), filepath.Join(ipythonPath, "IPython")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(venv, "bin", "python"), ipythonPath
}

// TestPipMagic: %pip runs `python -m pip` of the interpreter itself; where
// that has no pip, it is a clear error result at once.
func TestPipMagic(t *testing.T) {
	t.Parallel()
	in := newTestInterp(t, nil)
	if b, err := exec.Command(testPython(t), "-m", "pip", "--version").Output(); err == nil {
		res := run(t, in, "%pip --version")
		expectOK(t, res)
		if !strings.HasPrefix(res.Stdout, strings.TrimSpace(string(b))) {
			t.Errorf("%%pip --version printed %q, want %q", res.Stdout, b)
		}
	}
	python, site := pythonWithoutPip(t)
	in = newTestInterp(t, func(c *Config) {
		c.Python = python
		c.Env = append(os.Environ(), "PYTHONPATH="+site)
	})
	res := runT(t, in, "%pip install anything", 20*time.Second)
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "UsageError" ||
		!strings.Contains(res.Error.Value, "pip is not installed for "+python) {
		t.Fatalf("%%pip without pip: %+v", res)
	}
}

// TestNotebookSyntaxWithoutIPython: without IPython, cells are plain
// Python as before: a shell escape is a SyntaxError.
func TestNotebookSyntaxWithoutIPython(t *testing.T) {
	t.Parallel()
	python, _ := pythonWithoutPip(t)
	in := newTestInterp(t, func(c *Config) { c.Python = python })
	res := run(t, in, "!echo hi")
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "SyntaxError" || res.Stdout != "" {
		t.Fatalf("!echo hi without IPython: %+v", res)
	}
	if !strings.Contains(res.Stderr, "`!cmd` and `%magic` need IPython") {
		t.Errorf("no hint that notebook syntax needs IPython: stderr %q", res.Stderr)
	}
	expectOK(t, run(t, in, "1 + 1"))
}

// TestPipWithoutNetwork: where no route leaves the machine (a guest whose
// sandbox has no policy has no network device; here a network namespace of
// its own), a failed %pip install is a PipError that says why and what
// to do, with pip configured by the image's pip.conf.
func TestPipWithoutNetwork(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace of its own (unshare -n)")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is missing")
	}
	if err := exec.Command(testPython(t), "-m", "pip", "--version").Run(); err != nil {
		t.Skip("the test python has no pip")
	}
	conf, err := filepath.Abs("../../image/files/etc/pip.conf")
	if err != nil {
		t.Fatal(err)
	}
	in := newTestInterp(t, func(c *Config) {
		c.Launcher = []string{"unshare", "-n"}
		// pip as the image configures it: none of this machine's PIP_*.
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "PIP_") {
				c.Env = append(c.Env, kv)
			}
		}
		c.Env = append(c.Env, "PIP_CONFIG_FILE="+conf, "HOME="+t.TempDir())
	})
	res := runT(t, in, "print([l.split()[0] for l in open('/proc/net/route') if not l.startswith('Iface')])", 20*time.Second)
	expectOK(t, res)
	if strings.TrimSpace(res.Stdout) != "[]" {
		t.Fatalf("the interpreter's network namespace has routes out of %s, want none", res.Stdout)
	}
	res = runT(t, in, "%pip install cellvm-no-such-package", 2*time.Minute)
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "PipError" ||
		!strings.Contains(res.Error.Value, "no network access") || !strings.Contains(res.Error.Value, "pypi.org and files.pythonhosted.org") {
		t.Fatalf("%%pip install without a network: %+v", res)
	}
	t.Logf("pip said:\n%s%s", res.Stdout, res.Stderr)
	// pip.conf's retries = 1: one retry of the index page, not five.
	if n := strings.Count(res.Stdout+res.Stderr, "Retrying"); n > 1 {
		t.Errorf("pip retried %d times, want at most 1 (image/files/etc/pip.conf):\n%s%s", n, res.Stdout, res.Stderr)
	}
}

// TestShellEscapeAddsTheUserSite: a user site directory that a shell
// escape creates (as `!pip install x` does on first use) joins sys.path at
// once, so what was installed there imports in the next cell.
func TestShellEscapeAddsTheUserSite(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	in := newTestInterp(t, func(c *Config) {
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "PYTHONUSERBASE=") {
				c.Env = append(c.Env, kv)
			}
		}
		c.Env = append(c.Env, "HOME="+home)
	})
	res := run(t, in, "import site, sys\np = site.getusersitepackages()\nprint(p in sys.path, site.ENABLE_USER_SITE)")
	expectOK(t, res)
	if strings.TrimSpace(res.Stdout) != "False True" {
		t.Skipf("the test python's user site is on sys.path already or disabled: %q", res.Stdout)
	}
	expectOK(t, run(t, in, "!mkdir -p {p} && echo 'V = 7' > {p}/cellvm_kitmod.py"))
	res = run(t, in, "import cellvm_kitmod\ncellvm_kitmod.V")
	expectOK(t, res)
	if res.MainResult() == nil || res.MainResult().Data["text/plain"] != "7" {
		t.Errorf("import from the user site a shell escape made: %+v", res)
	}
}
