package clients

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// readmeBlock returns the README's fenced code block that starts with
// first (after the ```lang line).
func readmeBlock(t *testing.T, lang, first string) string {
	t.Helper()
	return markdownBlock(t, "README.md", lang, first)
}

// markdownBlock returns the fenced code block of the repository's file
// (a path from the root) that starts with first.
func markdownBlock(t *testing.T, file, lang, first string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), file))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```"+lang+"\n"+first)
	if !ok {
		t.Fatalf("%s has no %s block starting with %q", file, lang, first)
	}
	code, _, ok := strings.Cut(rest, "```\n")
	if !ok {
		t.Fatalf("%s's %s block is not closed", file, lang)
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
	runReadmeExamples(t, serveAPI(t, newRigCells()), time.Minute)
}

// TestRigReadmeExamples runs them against the real daemon and real
// microVMs.
func TestRigReadmeExamples(t *testing.T) {
	runReadmeExamples(t, realDaemon(t), 15*time.Minute)
}

// TestPythonReadmeSnapshotExample runs the Python client's README example
// of snapshots, forks and pause against the fake, which forks and pauses
// with variables kept: it prints what its comments say, and leaves no
// sandbox or snapshot behind.
func TestPythonReadmeSnapshotExample(t *testing.T) {
	m := sandboxtest.New()
	out := runPythonReadmeBlock(t, m, "# Snapshots, forks and pause.\n")
	if out != "snapshot 41\n41\n" {
		t.Errorf("the example printed %q, want \"snapshot 41\\n41\\n\"", out)
	}
	events := strings.Join(m.Happened(), "\n")
	for _, want := range []string{"pause sb-fake1", "resume sb-fake1 (by a call)", "delete snapshot snap-"} {
		if !strings.Contains(events, want) {
			t.Errorf("the fake did not see %q:\n%s", want, events)
		}
	}
	if left := leftoversOf(t, m); len(left.sandboxes) != 0 || len(left.snapshots) != 0 {
		t.Errorf("the example left sandboxes %v and snapshots %v", left.sandboxes, left.snapshots)
	}
}

// TestPythonReadmeWorkspaceExample runs the Python client's README example
// of workspaces against the fake, which keeps a workspace's files for the
// next sandbox with its name: it prints what its comments say, and leaves
// no sandbox or workspace behind.
func TestPythonReadmeWorkspaceExample(t *testing.T) {
	m := sandboxtest.New()
	out := runPythonReadmeBlock(t, m, "# Workspaces, files that outlive a sandbox.\n")
	if want := "kept\n[('chat-42', None)]\nTrue\n"; out != want {
		t.Errorf("the example printed %q, want %q", out, want)
	}
	events := strings.Join(m.Happened(), "\n")
	for _, want := range []string{"make workspace chat-42", "delete sb-fake1", "create sb-fake2", "delete workspace chat-42"} {
		if !strings.Contains(events, want) {
			t.Errorf("the fake did not see %q:\n%s", want, events)
		}
	}
	if strings.Count(events, "make workspace") != 1 {
		t.Errorf("the second sandbox did not get the first one's workspace:\n%s", events)
	}
	if left := leftoversOf(t, m); len(left.sandboxes) != 0 || len(left.workspaces) != 0 {
		t.Errorf("the example left sandboxes %v and workspaces %v", left.sandboxes, left.workspaces)
	}
}

// TestPythonReadmeImageExample runs the Python client's README example of
// images against the fake, which has an image "team" built with --apt jq:
// it prints what its comments say, its sandbox booted the image, and the
// image is deleted once the sandbox is.
func TestPythonReadmeImageExample(t *testing.T) {
	m := sandboxtest.New()
	out := runPythonReadmeBlock(t, m, "# Images, root file systems a sandbox boots.\n")
	if want := "3.11.2 ['jq']\nteam\nTrue\n"; out != want {
		t.Errorf("the example printed %q, want %q", out, want)
	}
	events := strings.Join(m.Happened(), "\n")
	if want := "create sb-fake1 image team\ndelete sb-fake1\ndelete image team"; !strings.Contains(events, want) {
		t.Errorf("the fake did not see %q:\n%s", want, events)
	}
	if left := leftoversOf(t, m); slices.Contains(left.images, "team") || len(left.sandboxes) != 0 {
		t.Errorf("the example left image team (images %v) or sandboxes %v", left.images, left.sandboxes)
	}
}

// runPythonReadmeBlock runs the Python client's README block that starts
// with first against a daemon over m and returns its output.
func runPythonReadmeBlock(t *testing.T, m *sandboxtest.Manager, first string) string {
	t.Helper()
	sock := serveAPI(t, m)
	dir := t.TempDir()
	script := filepath.Join(dir, "example.py")
	if err := os.WriteFile(script, []byte(markdownBlock(t, "clients/python/README.md", "python", first)), 0o644); err != nil {
		t.Fatal(err)
	}
	return runIn(t, dir, []string{"CELLVM_SOCKET=" + sock, "PYTHONPATH=" + filepath.Join(clientsDir(t), "python")},
		time.Minute, python(t), script)
}
