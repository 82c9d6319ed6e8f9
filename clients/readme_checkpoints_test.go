package clients

import (
	"strings"
	"testing"

	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// TestPythonReadmeTimeTravelExample runs the Python client's README
// example of checkpoints against the fake, which keeps real checkpoints of
// its variables: it prints what its comments say, undoes and branches, and
// leaves no sandbox behind.
func TestPythonReadmeTimeTravelExample(t *testing.T) {
	m := sandboxtest.New()
	out := runPythonReadmeBlock(t, m, "# Time travel.\n")
	if want := "1\n1\n[1, 2]\n10 1\n"; out != want {
		t.Errorf("the example printed %q, want %q", out, want)
	}
	events := strings.Join(m.Happened(), "\n")
	for _, want := range []string{"restore sb-fake1 checkpoint 1", "create sb-fake2 branch of sb-fake1 checkpoint 1"} {
		if !strings.Contains(events, want) {
			t.Errorf("the fake did not see %q:\n%s", want, events)
		}
	}
	if left := leftoversOf(t, m); len(left.sandboxes) != 0 {
		t.Errorf("the example left sandboxes %v", left.sandboxes)
	}
}
