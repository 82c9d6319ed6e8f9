package chat

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/cellvm/cellvm/agent/convstore"
	"github.com/cellvm/cellvm/agent/modeltest"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestModelFromEnvPicksProvider(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		flag string
		want string
	}{
		{map[string]string{"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o"}, "", "anthropic"},
		{map[string]string{"OPENAI_API_KEY": "o"}, "", "openai"},
		{map[string]string{"OPENAI_BASE_URL": "http://x/v1"}, "auto", "openai"},
		{map[string]string{"OPENAI_API_KEY": "o"}, "responses", "responses"},
		{map[string]string{"GEMINI_API_KEY": "g"}, "", "gemini"},
	} {
		_, got, err := ModelFromEnv(tc.flag, "", 0, env(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("ModelFromEnv(%q, %v) = %q, %v; want %q", tc.flag, tc.env, got, err, tc.want)
		}
	}
	if _, _, err := ModelFromEnv("", "", 0, env(nil)); err == nil || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") {
		t.Errorf("no keys: err = %v", err)
	}
	if _, _, err := ModelFromEnv("anthropic", "", 0, env(map[string]string{"OPENAI_API_KEY": "o"})); err == nil {
		t.Error("--provider anthropic without its key accepted")
	}
}

// TestChatDefaultScript runs the default conversation through an
// OpenAI-compatible server given by OPENAI_BASE_URL, prints calls and
// results, saves the chart, and deletes the one-off sandbox.
func TestChatDefaultScript(t *testing.T) {
	srv := modeltest.New(modeltest.DefaultScript())
	hs := srv.Start()
	defer hs.Close()
	model, provider, err := ModelFromEnv("", "", 0, env(map[string]string{"OPENAI_BASE_URL": hs.URL + "/v1"}))
	if err != nil {
		t.Fatal(err)
	}
	m := sandboxtest.New()
	m.Script = modeltest.DefaultScriptCells()
	var stdout, stderr bytes.Buffer
	dir := t.TempDir()
	res, err := Run(context.Background(), Options{Manager: m, Model: model, Provider: provider, Question: "mean of b?", OutDir: dir, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr.String())
	}
	if !strings.HasSuffix(strings.TrimSpace(stdout.String()), modeltest.Answer) {
		t.Errorf("stdout = %q; want it to end with the answer", stdout.String())
	}
	for _, want := range []string{">> run_python [call_load]", "KeyError: 'B'", "<< run_python [call_fix] ok", "2.5", "[image 1 saved to "} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if len(res.Images) != 1 {
		t.Fatalf("images saved: %v", res.Images)
	}
	if data, err := os.ReadFile(res.Images[0]); err != nil || !bytes.Equal(data, sandboxtest.ChartPNG()) {
		t.Errorf("saved image: %v", err)
	}
	if m.Live() != 0 || len(m.Deleted()) != 1 {
		t.Errorf("one-off sandbox not deleted: live %d", m.Live())
	}
	for _, p := range modeltest.CheckDefaultTranscript(srv.Requests(), false) {
		t.Error(p)
	}
}

// TestChatConversationKeepsSandbox: two invocations with the same
// conversation id share the sandbox (variables survive) and the history;
// when the sandbox is gone, a new one is made and the model is told.
func TestChatConversationKeepsSandbox(t *testing.T) {
	srv := modeltest.New(modeltest.Script{
		{Calls: []modeltest.Call{{ID: "c1", Name: "run_python", Args: `{"code": "x = 41"}`}}},
		{Text: "x is set."},
		{Calls: []modeltest.Call{{ID: "c2", Name: "run_python", Args: `{"code": "print(x)"}`}}},
		{Text: "x is 41."},
		{Text: "noted."},
	})
	hs := srv.Start()
	defer hs.Close()
	model, _, _ := ModelFromEnv("anthropic", "", 0, env(map[string]string{"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": hs.URL}))
	m := sandboxtest.New()
	store := convstore.Store{Dir: t.TempDir()}
	ask := func(q string) (Result, string) {
		var stdout, stderr bytes.Buffer
		res, err := Run(context.Background(), Options{Manager: m, Model: model, Question: q, Conversation: "proj", Store: store, OutDir: t.TempDir(), Stdout: &stdout, Stderr: &stderr})
		if err != nil {
			t.Fatalf("Run(%q): %v\n%s", q, err, stderr.String())
		}
		return res, stderr.String()
	}
	r1, _ := ask("set x to 41")
	r2, log2 := ask("what is x?")
	if r1.SandboxID != r2.SandboxID || m.Live() != 1 || len(m.Deleted()) != 0 {
		t.Fatalf("sandboxes %s then %s, live %d: want one kept", r1.SandboxID, r2.SandboxID, m.Live())
	}
	if !strings.Contains(log2, "41") || r2.Outcome.Answer != "x is 41." {
		t.Errorf("second invocation did not see x: %s", log2)
	}
	reqs := srv.Requests()
	if n := len(reqs[len(reqs)-1].Turns); n != 7 {
		t.Errorf("last request has %d turns; want 7 (the first invocation's history included)", n)
	}
	conv, found, err := store.Load("proj")
	if err != nil || !found || conv.SandboxID != r1.SandboxID || len(conv.Messages) != 8 {
		t.Errorf("stored conversation: found %v, %v, sandbox %s, %d messages", found, err, conv.SandboxID, len(conv.Messages))
	}

	m.Delete(context.Background(), r1.SandboxID)
	r3, log3 := ask("again")
	if r3.SandboxID == r1.SandboxID || !strings.Contains(log3, "is gone") {
		t.Errorf("lost sandbox not replaced: %s, %s", r3.SandboxID, log3)
	}
	reqs = srv.Requests()
	last := reqs[len(reqs)-1].Turns
	if q := last[len(last)-1].Text; !strings.Contains(q, "sandbox was replaced") {
		t.Errorf("the model was not told the sandbox was replaced: %q", q)
	}
}
