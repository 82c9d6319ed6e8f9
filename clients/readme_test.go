package clients

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the README's fenced code block that starts with
// first (after the ```lang line).
func readmeBlock(t *testing.T, lang, first string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```"+lang+"\n"+first)
	if !ok {
		t.Fatalf("README.md has no %s block starting with %q", lang, first)
	}
	code, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("README.md's %s block is not closed", lang)
	}
	return first + code
}

// runReadmeExamples runs the README's Python and JavaScript examples
// against the daemon at sock and checks that they print what the README
// says they print.
func runReadmeExamples(t *testing.T, sock string, timeout time.Duration) {
	t.Run("python", func(t *testing.T) {
		dir := t.TempDir()
		script := filepath.Join(dir, "readme.py")
		if err := os.WriteFile(script, []byte(readmeBlock(t, "python", "from cellvm import Sandbox\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		out := runIn(t, dir, []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")},
			timeout, python(t), script)
		for _, want := range []string{"rows: 3\n", "2.0 ok None\n", "2 /workspace/in.csv\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("the README's Python example did not print %q:\n%s", want, out)
			}
		}
	})
	t.Run("js", func(t *testing.T) {
		nd := node(t)
		dir := linkedJSDir(t, "readme.mjs", []byte(readmeBlock(t, "js", "import { Sandbox } from 'cellvm';\n")))
		out := runIn(t, dir, []string{"CELLVM_SOCKET=" + sock}, timeout, nd, "readme.mjs")
		for _, want := range []string{"2.0 ok\n", "2 /workspace/in.csv\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("the README's JavaScript example did not print %q:\n%s", want, out)
			}
		}
	})
}

// TestReadmeExamplesOnTheFake runs the README's examples against the fake,
// which answers their cells as the real interpreter does.
func TestReadmeExamplesOnTheFake(t *testing.T) {
	runReadmeExamples(t, serveAPI(t, rigCells{newFakeManager()}), time.Minute)
}

// TestRigReadmeExamples runs them against the real daemon and real
// microVMs.
func TestRigReadmeExamples(t *testing.T) {
	runReadmeExamples(t, realDaemon(t), 15*time.Minute)
}
