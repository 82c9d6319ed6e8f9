package sessions

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/cell"
	"github.com/cellvm/cellvm/guestinit/interp"
)

// Each language has its own session with its own variables; JavaScript
// and TypeScript share Node's; a language's other sessions are made with
// its runtime and share the primary's cells cgroup.
func TestLanguagesHaveSeparateSessions(t *testing.T) {
	r, m := newRegistry(t, nil)
	runIn(t, r, cell.Python, "", "x = 'py'")
	runIn(t, r, cell.JavaScript, "", "x = 'js'")
	runIn(t, r, cell.Bash, "", "x = 'sh'")
	for _, c := range []struct {
		lang cell.Language
		want string
	}{{cell.Python, "'py'"}, {cell.JavaScript, "'js'"}, {cell.TypeScript, "'js'"}, {cell.Bash, "'sh'"}} {
		if got := value(t, r, c.lang, "", "x"); got != c.want {
			t.Errorf("%s: x = %s, want %s", c.lang, got, c.want)
		}
	}
	if len(m.cfgs) != 2 {
		t.Fatalf("%d sessions made, want 2 (node, bash): %+v", len(m.cfgs), m.cfgs)
	}
	for i, want := range []string{"node", "bash"} {
		c := m.cfgs[i]
		if c.Runtime != want || c.CellsFrom == nil || c.Python != "" || c.Dir == "" {
			t.Errorf("session %d made with runtime %q, CellsFrom %v, Python %q, Dir %q", i, c.Runtime, c.CellsFrom != nil, c.Python, c.Dir)
		}
	}
}

// Two contexts of one language are separate; a restart of one leaves the
// other (and the default) its variables.
func TestContextsAreSeparateAndRestartAlone(t *testing.T) {
	r, _ := newRegistry(t, nil)
	runIn(t, r, cell.Python, "", "x = 0")
	runIn(t, r, cell.Python, "a", "x = 1")
	runIn(t, r, cell.Python, "b", "x = 2")
	if got := value(t, r, cell.Python, "a", "x"); got != "1" {
		t.Fatalf("a: x = %s", got)
	}
	if err := r.RestartIn(cell.Python, "a"); err != nil {
		t.Fatal(err)
	}
	res := runIn(t, r, cell.Python, "a", "x")
	if res.Error == nil || res.Error.Name != "NameError" {
		t.Fatalf("after its restart, a still has x: %+v", res)
	}
	if got := value(t, r, cell.Python, "b", "x"); got != "2" {
		t.Fatalf("b: x = %s after a's restart", got)
	}
	if got := value(t, r, cell.Python, cell.DefaultContext, "x"); got != "0" {
		t.Fatalf("default: x = %s after a's restart", got)
	}
	// The old Interpreter methods are the Python default's.
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if res, _ := r.Run(context.Background(), "x", time.Minute, nil); res.Error == nil {
		t.Fatalf("the default keeps x after Restart: %+v", res)
	}
	if got := value(t, r, cell.Python, "b", "x"); got != "2" {
		t.Fatalf("b: x = %s after the default's restart", got)
	}
}

// A restart of a named context that does not exist is an error and makes
// none; a default one is started fresh.
func TestRestartOfAMissingContext(t *testing.T) {
	r, m := newRegistry(t, nil)
	if err := r.RestartIn(cell.JavaScript, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("restart of a missing context: %v", err)
	}
	for _, bad := range []string{"../x", "a/b", ".hidden", strings.Repeat("n", 65)} {
		if _, err := r.RunIn(context.Background(), cell.Bash, bad, "1", time.Minute, nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("a cell in context %q: %v", bad, err)
		}
	}
	if len(m.cfgs) != 0 || len(r.Contexts()) != 0 {
		t.Fatalf("a failed restart made a session: %+v", r.Contexts())
	}
	if err := r.RestartIn(cell.Bash, ""); err != nil {
		t.Fatal(err)
	}
	cs := r.Contexts()
	if len(cs) != 1 || cs[0].Language != "bash" || cs[0].Name != cell.DefaultContext || !cs[0].Running {
		t.Fatalf("after restarting bash's default: %+v", cs)
	}
}

// A sandbox holds at most cell.MaxContexts sessions, the primary among
// them: one more, by create or by a cell, is ErrFull, and nothing is
// left of it.
func TestContextLimit(t *testing.T) {
	runDir := t.TempDir()
	r, m := newRegistry(t, func(c *interp.Config) { c.RunDir = runDir })
	for i := 1; i < cell.MaxContexts; i++ {
		if _, err := r.CreateContext(cell.Python, "c"+string(rune('a'+i)), ""); err != nil {
			t.Fatalf("context %d: %v", i, err)
		}
	}
	if _, err := r.CreateContext(cell.Python, "one-more", ""); !errors.Is(err, ErrFull) {
		t.Fatalf("create past the limit: %v", err)
	}
	_, err := r.RunIn(context.Background(), cell.JavaScript, "", "1", time.Minute, nil)
	if !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "16") {
		t.Fatalf("a cell past the limit: %v", err)
	}
	if len(m.cfgs) != cell.MaxContexts-1 {
		t.Fatalf("%d sessions made", len(m.cfgs))
	}
	if _, err := os.Stat(filepath.Join(runDir, "node.default")); !os.IsNotExist(err) {
		t.Fatalf("a refused session left its run directory: %v", err)
	}
	// Deleting one makes room.
	if err := r.DeleteContext(cell.Python, "cb"); err != nil {
		t.Fatal(err)
	}
	if got := value(t, r, cell.JavaScript, "", "6*7"); got != "42" {
		t.Fatalf("javascript after a delete: %s", got)
	}
}

// Delete ends a context (its program, its files); a later cell of that
// name starts afresh. The default ones and missing ones are not deleted.
func TestDeleteContext(t *testing.T) {
	runDir := t.TempDir()
	r, _ := newRegistry(t, func(c *interp.Config) { c.RunDir = runDir })
	if _, err := r.CreateContext(cell.TypeScript, "a", ""); err != nil {
		t.Fatal(err)
	}
	runIn(t, r, cell.JavaScript, "a", "x = 5")
	dir := filepath.Join(runDir, "node.a")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the context's run directory: %v", err)
	}
	if err := r.DeleteContext(cell.Python, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of python's a (javascript has one): %v", err)
	}
	if err := r.DeleteContext(cell.TypeScript, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the deleted context's run directory is left: %v", err)
	}
	if err := r.DeleteContext(cell.JavaScript, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a second delete: %v", err)
	}
	for _, name := range []string{"", cell.DefaultContext} {
		if err := r.DeleteContext(cell.Python, name); !errors.Is(err, ErrInvalid) {
			t.Fatalf("delete of the default (%q): %v", name, err)
		}
	}
	if res := runIn(t, r, cell.JavaScript, "a", "x"); res.Error == nil {
		t.Fatalf("a context made again by a cell has the deleted one's x: %+v", res)
	}
	if len(childrenOf(os.Getpid())) != 1 {
		t.Fatalf("processes %v: want only the new a's", childrenOf(os.Getpid()))
	}
}

// Create checks what it is given, and its cells start in its cwd.
func TestCreateContext(t *testing.T) {
	r, _ := newRegistry(t, nil)
	cwd := t.TempDir()
	file := filepath.Join(cwd, "f")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct {
		name, cwd string
		want      error
	}{
		{"", "", ErrInvalid},
		{cell.DefaultContext, "", ErrInvalid},
		{"-x", "", ErrInvalid},
		{"x", "relative/dir", ErrInvalid},
		{"x", file, ErrInvalid},
		{"x", filepath.Join(cwd, "missing"), ErrInvalid},
	} {
		if _, err := r.CreateContext(cell.Python, c.name, c.cwd); !errors.Is(err, c.want) {
			t.Errorf("create %q in %q: %v, want %v", c.name, c.cwd, err, c.want)
		}
	}
	if cs := r.Contexts(); len(cs) != 0 {
		t.Fatalf("refused creates left contexts: %+v", cs)
	}
	info, err := r.CreateContext(cell.TypeScript, "x", cwd+"/")
	if err != nil {
		t.Fatal(err)
	}
	if info.Language != "javascript" || info.Name != "x" || info.Cwd != cwd || info.Running {
		t.Fatalf("created %+v", info)
	}
	if _, err := r.CreateContext(cell.JavaScript, "x", ""); !errors.Is(err, ErrExists) {
		t.Fatalf("create of an existing context: %v", err)
	}
	if got := value(t, r, cell.JavaScript, "x", "__import__('os').getcwd()"); got != "'"+cwd+"'" {
		t.Fatalf("the context's cwd is %s, want %s", got, cwd)
	}
}

// List: the named contexts, and the default sessions once used, each
// language under its runtime's first name, in the languages' order.
func TestContextsList(t *testing.T) {
	r, _ := newRegistry(t, nil)
	if cs := r.Contexts(); len(cs) != 0 {
		t.Fatalf("a new sandbox lists %+v", cs)
	}
	if _, err := r.CreateContext(cell.Bash, "b", ""); err != nil {
		t.Fatal(err)
	}
	runIn(t, r, cell.TypeScript, "z", "1")
	runIn(t, r, cell.Python, "", "1")
	var got []string
	for _, c := range r.Contexts() {
		got = append(got, c.Language+"/"+c.Name+"/"+map[bool]string{true: "running", false: "idle"}[c.Running])
	}
	want := "python/default/running javascript/z/running bash/b/idle"
	if strings.Join(got, " ") != want {
		t.Fatalf("Contexts = %v, want %s", got, want)
	}
}

// The environment reaches every session, those there and those made
// later; an interrupt reaches the cell that runs, wherever it runs.
func TestSetEnvAndInterruptReachEverySession(t *testing.T) {
	r, _ := newRegistry(t, nil)
	runIn(t, r, cell.Bash, "", "1")
	if err := r.SetEnv(map[string]string{"CELLVM_V": "7"}); err != nil {
		t.Fatal(err)
	}
	const get = "__import__('os').environ.get('CELLVM_V')"
	for _, c := range []struct {
		lang cell.Language
		name string
	}{{cell.Python, ""}, {cell.Bash, ""}, {cell.JavaScript, "later"}} {
		if got := value(t, r, c.lang, c.name, get); got != "'7'" {
			t.Errorf("%s/%s: CELLVM_V = %s", c.lang, c.name, got)
		}
	}
	if r.Interrupt() {
		t.Fatal("Interrupt with no cell running reports one")
	}
	runIn(t, r, cell.JavaScript, "later", "y = 1")
	done := make(chan cell.Result, 1)
	go func() {
		res, _ := r.RunIn(context.Background(), cell.JavaScript, "later", "import time\nwhile True: time.sleep(0.01)", time.Minute, nil)
		done <- res
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !r.Interrupt() {
		if time.Now().After(deadline) {
			t.Fatal("the cell never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res := <-done
	if res.Error == nil || res.Error.Name != "KeyboardInterrupt" || !res.StateKept {
		t.Fatalf("the interrupted cell: %+v", res)
	}
	if got := value(t, r, cell.JavaScript, "later", "y"); got != "1" {
		t.Fatalf("y = %s after the interrupt", got)
	}
}

// Reseed reaches every running session and says whether NumPy was among
// them; an idle session has nothing to reseed.
func TestReseedEverySession(t *testing.T) {
	r, _ := newRegistry(t, nil)
	if np, err := r.Reseed(); err != nil || np {
		t.Fatalf("reseed with nothing running: %v %v", np, err)
	}
	runIn(t, r, cell.Python, "", "import random")
	runIn(t, r, cell.Bash, "", "import random; random.seed(1); a = random.random(); random.seed(1)")
	if _, err := r.Reseed(); err != nil {
		t.Fatal(err)
	}
	if got := value(t, r, cell.Bash, "", "random.random() != a"); got != "True" {
		t.Fatal("the second session's generator was not reseeded")
	}
}

// Close closes every session and is idempotent; calls after it fail.
func TestClose(t *testing.T) {
	runDir := t.TempDir()
	r, _ := newRegistry(t, func(c *interp.Config) { c.RunDir = runDir })
	runIn(t, r, cell.Python, "", "1")
	runIn(t, r, cell.Bash, "", "1")
	runIn(t, r, cell.Python, "p", "1")
	if n := len(childrenOf(os.Getpid())); n != 3 {
		t.Fatalf("%d processes, want 3", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if left := childrenOf(os.Getpid()); len(left) != 0 {
		t.Fatalf("processes left after Close: %v", left)
	}
	for _, d := range []string{"bash.default", "python.p"} {
		if _, err := os.Stat(filepath.Join(runDir, d)); !os.IsNotExist(err) {
			t.Fatalf("%s left after Close: %v", d, err)
		}
	}
	if _, err := r.RunIn(context.Background(), cell.Bash, "", "1", time.Minute, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("a cell after Close: %v", err)
	}
	if _, err := r.CreateContext(cell.Bash, "n", ""); !errors.Is(err, ErrClosed) {
		t.Fatalf("a create after Close: %v", err)
	}
}
