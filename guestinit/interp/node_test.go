package interp

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
)

// testNode is the node under test (the host's; the guest has Debian's 18).
func testNode(t *testing.T) string {
	t.Helper()
	p := os.Getenv("CELLVM_TEST_NODE")
	if p == "" {
		var err error
		if p, err = exec.LookPath(NodeName); err != nil {
			t.Skip("no node on PATH (set CELLVM_TEST_NODE)")
		}
	}
	return p
}

// nodeEnv is the environment with node's directory first on PATH (a
// node session looks its program up there), and extra.
func nodeEnv(t *testing.T, node string, extra ...string) []string {
	t.Helper()
	if filepath.Base(node) != NodeName {
		t.Fatalf("CELLVM_TEST_NODE must name a file called %s: %s", NodeName, node)
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(node)+string(filepath.ListSeparator)+os.Getenv("PATH"))
	return append(env, extra...)
}

func newNodeInterp(t *testing.T, mod func(*Config)) *Interp {
	t.Helper()
	node := testNode(t)
	return newTestInterp(t, func(c *Config) {
		c.Runtime = "node"
		c.Env = nodeEnv(t, node, "CELLVM_TYPESCRIPT="+filepath.Join(t.TempDir(), "none.js"))
		if mod != nil {
			mod(c)
		}
	})
}

func runJS(t *testing.T, in *Interp, lang cell.Language, code string, timeout time.Duration) cell.Result {
	t.Helper()
	res, err := in.RunLanguage(context.Background(), lang, code, timeout, nil)
	if err != nil {
		t.Fatalf("RunLanguage(%q): %v", code, err)
	}
	return res
}

func expectMain(t *testing.T, res cell.Result, want string) {
	t.Helper()
	expectOK(t, res)
	if got := mainText(t, res); got != want {
		t.Fatalf("main result %q, want %q", got, want)
	}
}

func TestNodeNotebook(t *testing.T) {
	in := newNodeInterp(t, nil)
	js := func(code string) cell.Result { return runJS(t, in, cell.JavaScript, code, 30*time.Second) }

	if res := js("let x = 41"); res.MainResult() != nil || res.Status != cell.StatusOK {
		t.Fatalf("a declaration: %+v", res)
	}
	expectMain(t, js("x + 1"), "42")
	// A cell runs again: top-level declarations are redeclarable.
	expectOK(t, js("let x = 41\nconst c = 1\nclass K { v() { return 7 } }\nfunction f() { return c }"))
	expectOK(t, js("const c = 2\nclass K { v() { return 8 } }"))
	expectMain(t, js("[x, c, new K().v(), f()]"), "[ 41, 2, 8, 2 ]")

	// The rewrite sees tokens: not declarations in strings, templates,
	// regular expressions or comments; destructuring; classes in async cells.
	for i := 0; i < 2; i++ {
		expectMain(t, js("const re = /['\"`]let x/g; const tpl = `a ${ \"let\" } b ${`nested ${1}`}`; // let y = 2\n/* const z = 3 */ tpl"), "'a let b nested 1'")
	}
	expectMain(t, js("typeof y + typeof z + re.flags"), "'undefinedundefinedg'")
	expectMain(t, js("const [a1, {b1}] = [1, {b1: 2}]\na1 + b1"), "3")
	expectOK(t, js("class A { static v = 5 }\nconst w = await Promise.resolve(A.v)"))
	expectMain(t, js("A.v + w"), "10")

	res := js("console.log('out'); console.error('err'); void process.stdout.write('raw\\n')")
	expectOK(t, res)
	if res.Stdout != "out\nraw\n" || res.Stderr != "err\n" || res.MainResult() != nil {
		t.Fatalf("stdout %q stderr %q results %+v", res.Stdout, res.Stderr, res.Results)
	}

	// An object reads as util.inspect shows it.
	expectMain(t, js("({a: 1, b: 'two', c: [1, 2, 3], d: new Map([['k', 1]])})"),
		"{ a: 1, b: 'two', c: [ 1, 2, 3 ], d: Map(1) { 'k' => 1 } }")
	expectMain(t, js("'a string'"), "'a string'")
	if res := js("undefined"); res.MainResult() != nil {
		t.Fatalf("undefined has a result: %+v", res.Results)
	}

	// Top-level await keeps the last expression's value and declarations.
	expectMain(t, js("await new Promise(r => setTimeout(() => r(5), 10))"), "5")
	expectMain(t, js("const {p, q: [r1]} = await Promise.resolve({p: 1, q: [2]})\nlet s = await 3, u = 4\np + r1 + s + u"), "10")
	expectMain(t, js("p * 100 + r1 * 10 + u"), "124")

	// require resolves from the working directory.
	expectMain(t, js("require('path').join('a', 'b')"), "'a/b'")

	// import(): of Node's modules and of files next to the cell; a
	// static import says what to do instead.
	if err := os.WriteFile(filepath.Join(in.cfg.Dir, "m.mjs"), []byte("export const v = 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expectMain(t, js("const {v} = await import('./m.mjs')\n(await import('node:path')).sep + v"), "'/7'")
	res = js("import('./m.mjs').then(m => console.log(m.v))")
	if res.Status != cell.StatusOK || !strings.HasPrefix(mainText(t, res), "Promise {") || res.Stdout != "7\n" {
		t.Fatalf("import(): %+v", res)
	}
	res = js("import fs from 'fs'")
	if res.Error == nil || !strings.Contains(res.Error.Value, "use require() or await import()") {
		t.Fatalf("static import: %+v", res)
	}

	// A process a cell spawns does not get the protocol pipes.
	link := func(fd uintptr) string {
		s, err := os.Readlink("/proc/self/fd/" + itoa(int(fd)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ctl, ev := link(in.p.ctl.Fd()), link(uintptr(in.p.evFD))
	res = js("require('child_process').execSync('for f in /proc/$$/fd/*; do readlink $f; done; true', {encoding: 'utf8'})")
	expectOK(t, res)
	if got := mainText(t, res); strings.Count(got, "\\n") < 3 || strings.Contains(got, ctl) || strings.Contains(got, ev) {
		t.Fatalf("a child's fds: %s (ctl %s, events %s)", got, ctl, ev)
	}
}

func TestNodeErrors(t *testing.T) {
	in := newNodeInterp(t, nil)
	js := func(code string) cell.Result { return runJS(t, in, cell.JavaScript, code, 30*time.Second) }

	res := js("let kept = 1\nfunction g() { throw new TypeError('boom') }\ng()")
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "TypeError" || res.Error.Value != "boom" || !res.StateKept {
		t.Fatalf("TypeError: %+v", res)
	}
	tb := strings.Join(res.Error.Traceback, "\n")
	if !strings.Contains(tb, "at g (<cell 1>:2:") || strings.Contains(tb, "cellvm_driver") {
		t.Fatalf("traceback %q", tb)
	}
	expectMain(t, js("kept"), "1")

	for _, c := range []struct{ code, name, value string }{
		{"await Promise.reject(new RangeError('r'))", "RangeError", "r"},
		{"throw 5", "Uncaught", "5"},
		{"1 +* 2", "SyntaxError", "Unexpected token '*'"},
		{"nope", "ReferenceError", "nope is not defined"},
		{"Promise.reject(new Error('unhandled')); 1", "Error", "unhandled"},
		{"setTimeout(() => { throw new EvalError('later') }, 0); await new Promise(r => setTimeout(r, 50))", "EvalError", "later"},
	} {
		res := js(c.code)
		if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != c.name || res.Error.Value != c.value || !res.StateKept {
			t.Errorf("%s: %+v %+v", c.code, res, res.Error)
		}
	}
	// An error after the cell ended is said with the next one.
	expectOK(t, js("setTimeout(() => { throw new Error('afterwards') }, 10)"))
	for i := 0; ; i++ {
		time.Sleep(100 * time.Millisecond)
		res = js("kept")
		expectMain(t, res, "1")
		if strings.Contains(res.Stderr, "Uncaught exception (after its cell ended): Error: afterwards") {
			break
		}
		if res.Stderr != "" || i == 50 {
			t.Fatalf("stderr %q", res.Stderr)
		}
	}
}

func TestNodeTimeoutKeepsState(t *testing.T) {
	in := newNodeInterp(t, nil)
	expectOK(t, runJS(t, in, cell.JavaScript, "let x = 41", 10*time.Second))
	for _, code := range []string{
		"while (true) {}",
		"await new Promise(() => {})",
		"await new Promise(r => setTimeout(r, 1e6))",
	} {
		start := time.Now()
		res := runJS(t, in, cell.JavaScript, code, time.Second)
		if res.Status != cell.StatusTimeout || !res.StateKept || res.KilledBy != cell.KilledByTimeout {
			t.Fatalf("%s: %+v", code, res)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: took %v", code, d)
		}
		expectMain(t, runJS(t, in, cell.JavaScript, "x", 10*time.Second), "41")
	}
	// Interrupt: a KeyboardInterrupt, state kept.
	go func() {
		time.Sleep(300 * time.Millisecond)
		in.Interrupt()
	}()
	res := runJS(t, in, cell.JavaScript, "while (true) {}", 0)
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept {
		t.Fatalf("interrupt: %+v", res)
	}
	// An endless loop after an await cannot be broken into: killed after
	// the grace period, said truthfully.
	res = runJS(t, in, cell.JavaScript, "await null; while (true) {}", time.Second)
	if res.Status != cell.StatusTimeout || res.StateKept {
		t.Fatalf("async loop: %+v", res)
	}
	res = runJS(t, in, cell.JavaScript, "typeof x", 10*time.Second)
	expectMain(t, res, "'undefined'")
}

func TestNodeMemoryBomb(t *testing.T) {
	in := newNodeInterp(t, func(c *Config) { c.MemoryMax = 128 << 20 })
	expectOK(t, runJS(t, in, cell.JavaScript, "let x = 1", 10*time.Second))
	res := runJS(t, in, cell.JavaScript, "const a = []; while (true) a.push(new Array(1e5).fill(1.5))", 60*time.Second)
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "OutOfMemory" || res.KilledBy != cell.KilledByOOM || res.StateKept {
		t.Fatalf("memory bomb: %+v %+v", res, res.Error)
	}
	expectMain(t, runJS(t, in, cell.JavaScript, "typeof x", 10*time.Second), "'undefined'")
	// A too large allocation is an ordinary error.
	res = runJS(t, in, cell.JavaScript, "let y = 2; new Array(2 ** 32)", 10*time.Second)
	if res.Status != cell.StatusError || res.Error.Name != "RangeError" || !res.StateKept {
		t.Fatalf("RangeError: %+v", res)
	}
	expectMain(t, runJS(t, in, cell.JavaScript, "y", 10*time.Second), "2")
}

func TestNodeDisplayAndReseed(t *testing.T) {
	in := newNodeInterp(t, nil)
	res := runJS(t, in, cell.JavaScript, `
display(Buffer.from('89504e470d0a1a0a0000', 'hex'))
display('data:image/png;base64,AAAA')
display({'text/html': '<b>x</b>', 'text/plain': 'x'})
display.html('<i>y</i>')
display('<b>plain</b>')
`, 10*time.Second)
	expectOK(t, res)
	want := []map[string]string{
		{"image/png": "iVBORw0KGgoAAA=="},
		{"image/png": "AAAA"},
		{"text/html": "<b>x</b>", "text/plain": "x"},
		{"text/html": "<i>y</i>"},
		{"text/plain": "<b>plain</b>"},
	}
	if len(res.Results) != len(want) {
		t.Fatalf("results %+v", res.Results)
	}
	for i, w := range want {
		for k, v := range w {
			if res.Results[i].Data[k] != v || len(res.Results[i].Data) != len(w) || res.Results[i].Main {
				t.Errorf("result %d: %+v, want %v", i, res.Results[i], w)
			}
		}
	}

	// reap: Node reaps its own children.
	if err := in.reapInDriver(in.p); err != nil {
		t.Fatal(err)
	}

	// Math.random is the driver's, reseeded on demand from /dev/urandom.
	expectOK(t, runJS(t, in, cell.JavaScript, "const r = Math.random(); const ok = r >= 0 && r < 1", 10*time.Second))
	if _, err := in.Reseed(); err != nil {
		t.Fatal(err)
	}
	expectMain(t, runJS(t, in, cell.JavaScript, "ok && new Set(Array.from({length: 1000}, Math.random)).size", 10*time.Second), "1000")
}

func TestNodeTypeScript(t *testing.T) {
	tsPath := typescriptForTest(t)
	in := newNodeInterp(t, func(c *Config) { c.Env = nodeEnv(t, testNode(t), "CELLVM_TYPESCRIPT="+tsPath) })
	ts := func(code string) cell.Result { return runJS(t, in, cell.TypeScript, code, 30*time.Second) }
	// The first TypeScript cell loads the compiler (9 MB of JavaScript):
	// time enough for a loaded machine.
	expectOK(t, runJS(t, in, cell.TypeScript, "let loaded: boolean = true", 2*time.Minute))
	expectOK(t, ts("interface P { n: number }\nfunction answer(p: P): number { return p.n + 1 }\nconst base: number = 41"))
	expectMain(t, ts("answer({n: base})"), "42")
	// A type error does not stop the cell; JavaScript shares the globals.
	expectMain(t, ts("const s: string = 5 as any as number; s"), "5")
	expectMain(t, runJS(t, in, cell.JavaScript, "answer({n: 1})", 10*time.Second), "2")
	expectMain(t, ts("await Promise.resolve<number>(7)"), "7")
}

func TestNodeTypeScriptUnavailable(t *testing.T) {
	in := newNodeInterp(t, nil)
	res := runJS(t, in, cell.TypeScript, "const a: number = 1", 10*time.Second)
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != "TypeScriptUnavailable" || !strings.Contains(res.Error.Value, "none.js") || !res.StateKept {
		t.Fatalf("%+v", res)
	}
	expectMain(t, runJS(t, in, cell.JavaScript, "1 + 1", 10*time.Second), "2")
}

func TestNoNodeIsACellError(t *testing.T) {
	empty := t.TempDir()
	// Config.Python is Python's only: a node session looks for node.
	in, err := New(Config{Runtime: "node", Python: DefaultPython, Dir: t.TempDir(), Env: []string{"PATH=" + empty}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	res, err := in.RunLanguage(context.Background(), cell.TypeScript, "1", 10*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "this image has no node on its PATH (PATH=" + empty + "): JavaScript and TypeScript cells need Node.js 18 or later; exec and files work"
	if res.Status != cell.StatusError || res.Error == nil || res.Error.Name != ErrNameNotFound || res.Error.Value != want {
		t.Fatalf("%+v", res)
	}
	if err := in.Restart(); !errors.Is(err, ErrNoPython) {
		t.Fatalf("Restart: %v", err)
	}
	if _, err := in.RunLanguage(context.Background(), cell.Python, "1", time.Second, nil); err == nil {
		t.Fatal("a python cell ran in a node session")
	}

	// A node older than 18: the driver says so, and so does the result.
	old := filepath.Join(t.TempDir(), "bin")
	writeScript(t, filepath.Join(old, "node"), `echo '{"ev": "unsupported", "version": "16.20.2"}' >&4`)
	in2, err := New(Config{Runtime: "node", Dir: t.TempDir(), Env: []string{"PATH=" + old}})
	if err != nil {
		t.Fatal(err)
	}
	defer in2.Close()
	res, err = in2.Run(context.Background(), "1", 10*time.Second, nil)
	want = "this image's node (" + filepath.Join(old, "node") + ") is Node.js 16.20.2: JavaScript and TypeScript cells need Node.js 18 or later; exec and files work"
	if err != nil || res.Error == nil || res.Error.Name != ErrNameTooOld || res.Error.Value != want {
		t.Fatalf("%+v, %v", res.Error, err)
	}
}

// typescriptForTest is TypeScript's compiler: `make typescript`'s, or
// one npm fetches into a temporary directory.
func typescriptForTest(t *testing.T) string {
	t.Helper()
	if root, err := filepath.Abs("../.."); err == nil {
		p := filepath.Join(root, "build", "typescript", "package", "lib", "typescript.js")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("no build/typescript (make typescript) and no npm")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "pack", "--silent", "typescript@5.9.3")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("npm pack typescript (unreachable?): %v: %s", err, out)
	}
	if out, err := exec.Command("tar", "-xzf", filepath.Join(dir, "typescript-5.9.3.tgz"), "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("untar: %v: %s", err, out)
	}
	return filepath.Join(dir, "package", "lib", "typescript.js")
}
