package clients

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agent/modeltest"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

// TestExamples runs each agent loop in examples/ against a fake model
// server (Anthropic Messages and OpenAI Chat Completions wire formats) and
// the daemon's API over a fake sandbox that answers the fake model's
// script like the real interpreter: the loop must carry the conversation
// to the model's answer with every call answered by id, the error readable,
// the long output cut from the middle with the count stated, and the chart
// sent back as an image where each API takes it.
func TestExamples(t *testing.T) {
	examples := filepath.Join(repoRoot(t), "examples")
	for _, c := range []struct {
		lang, file string
		api        modeltest.API
	}{
		{"python", "python/anthropic_agent.py", modeltest.Anthropic},
		{"python", "python/openai_agent.py", modeltest.OpenAI},
		{"js", "js/anthropic_agent.mjs", modeltest.Anthropic},
		{"js", "js/openai_agent.mjs", modeltest.OpenAI},
	} {
		t.Run(c.file, func(t *testing.T) {
			src := filepath.Join(examples, c.file)
			if n := lineCount(t, src); n >= 100 {
				t.Errorf("%s has %d lines; an example loop stays under 100", c.file, n)
			}
			model := modeltest.New(modeltest.DefaultScript())
			model.APIKey = "test-key"
			srv := model.Start()
			defer srv.Close()
			sandboxes := sandboxtest.New()
			sandboxes.Script = modeltest.DefaultScriptCells()
			env := []string{
				"CELLVM_SOCKET=" + serveAPI(t, sandboxes),
				"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=test-key", "ANTHROPIC_MODEL=fake",
				"OPENAI_BASE_URL=" + srv.URL + "/v1", "OPENAI_API_KEY=test-key", "OPENAI_MODEL=fake",
				"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
			}
			var out string
			switch c.lang {
			case "python":
				env = append(env, "PYTHONPATH="+filepath.Join(clientsDir(t), "python"), "PYTHONDONTWRITEBYTECODE=1")
				out = runIn(t, t.TempDir(), env, 2*time.Minute, python(t), src, "What is the mean of column b? Chart it.")
			case "js":
				// As a user has it: the example beside node_modules/cellvm.
				dir := linkedJSDir(t, filepath.Base(src), readFile(t, src))
				out = runIn(t, dir, env, 2*time.Minute, node(t), filepath.Base(src), "What is the mean of column b? Chart it.")
			}
			if !strings.Contains(out, modeltest.Answer) {
				t.Errorf("the loop did not print the model's answer:\n%s", out)
			}
			for _, v := range model.Violations() {
				t.Errorf("the model API's rules broken: %s", v)
			}
			for _, p := range modeltest.CheckDefaultTranscript(model.Requests(), c.api == modeltest.Anthropic) {
				t.Errorf("transcript: %s", p)
			}
			if sandboxes.Live() != 0 || len(sandboxes.Deleted()) != 1 {
				t.Errorf("the loop left %d sandboxes and deleted %d, want 0 and 1", sandboxes.Live(), len(sandboxes.Deleted()))
			}
			if t.Failed() {
				t.Logf("output:\n%s", out)
			}
		})
	}
}

func lineCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(strings.TrimSuffix(string(b), "\n"), "\n") + 1
}
