package agent_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/anthropic"
	"github.com/cellvm/cellvm/agent/gemini"
	"github.com/cellvm/cellvm/agent/modeltest"
	"github.com/cellvm/cellvm/agent/openai"
	"github.com/cellvm/cellvm/agent/responses"
	"github.com/cellvm/cellvm/sandbox"
	"github.com/cellvm/cellvm/sandbox/sandboxtest"
)

const testKey = "test-key"

type adapterCase struct {
	api modeltest.API
	// inResult: the API carries images inside tool results.
	inResult bool
	model    func(base string, c *agent.Caller) agent.Model
}

func noSleep(ctx context.Context, d time.Duration) error { return nil }

var adapters = []adapterCase{
	{modeltest.Anthropic, true, func(base string, c *agent.Caller) agent.Model {
		return &anthropic.Model{APIKey: testKey, BaseURL: base, Caller: c}
	}},
	{modeltest.OpenAI, false, func(base string, c *agent.Caller) agent.Model {
		return &openai.Model{APIKey: testKey, BaseURL: base + "/v1", Caller: c}
	}},
	{modeltest.Responses, true, func(base string, c *agent.Caller) agent.Model {
		return &responses.Model{APIKey: testKey, BaseURL: base + "/v1", Caller: c}
	}},
	{modeltest.Gemini, false, func(base string, c *agent.Caller) agent.Model {
		return &gemini.Model{APIKey: testKey, BaseURL: base, Caller: c}
	}},
}

// runScript plays script over one adapter against a fake sandbox.
func runScript(t *testing.T, ac adapterCase, script modeltest.Script, faults ...modeltest.Fault) (*modeltest.Server, agent.Outcome, []agent.Event, error, *sandboxtest.Manager) {
	t.Helper()
	srv := modeltest.New(script)
	srv.APIKey = testKey
	srv.AddFaults(faults...)
	hs := srv.Start()
	t.Cleanup(hs.Close)
	m := sandboxtest.New()
	m.Script = modeltest.DefaultScriptCells()
	ctx := context.Background()
	info, err := m.Create(ctx, sandbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var events []agent.Event
	r := agent.Runner{
		Model:   ac.model(hs.URL, &agent.Caller{Provider: string(ac.api), Sleep: noSleep}),
		Tools:   &agent.Toolbox{Manager: m, SandboxID: info.ID},
		OnEvent: func(e agent.Event) { events = append(events, e) },
	}
	out, err := r.Run(ctx, nil, "What is the mean of column b? Then chart it.")
	return srv, out, events, err, m
}

// TestAdaptersDefaultConversation: over each API's real wire format, the
// model asks for code, sees an error, fixes it, asks for a chart, answers;
// the transcript the server got back is checked field by field.
func TestAdaptersDefaultConversation(t *testing.T) {
	for _, ac := range adapters {
		t.Run(string(ac.api), func(t *testing.T) {
			srv, out, events, err, m := runScript(t, ac, modeltest.DefaultScript())
			if err != nil {
				t.Fatalf("Run: %v (violations %v)", err, srv.Violations())
			}
			if out.Answer != modeltest.Answer || out.Turns != 4 || out.Calls != 3 {
				t.Errorf("outcome: answer %q, %d turns, %d calls; want %q, 4, 3", out.Answer, out.Turns, out.Calls, modeltest.Answer)
			}
			if v := srv.Violations(); len(v) > 0 {
				t.Errorf("protocol violations: %v", v)
			}
			for _, p := range modeltest.CheckDefaultTranscript(srv.Requests(), ac.inResult) {
				t.Error(p)
			}
			if got := len(cellsRun(m)); got != 3 {
				t.Errorf("%d cells ran, want 3", got)
			}
			var calls, results int
			for _, e := range events {
				switch e.Type {
				case agent.EventToolCall:
					calls++
				case agent.EventToolResult:
					results++
					if e.Result.CallID != e.Call.ID {
						t.Errorf("event result id %s for call %s", e.Result.CallID, e.Call.ID)
					}
				}
			}
			if calls != 3 || results != 3 {
				t.Errorf("events: %d calls, %d results; want 3, 3", calls, results)
			}
			// The fake sandbox's traceback is 43 lines: its end is kept.
			reqs0 := srv.Requests()
			if tb := reqs0[len(reqs0)-1].Turns[2].Results[0].Text; !strings.Contains(tb, "----> 3") ||
				!strings.Contains(tb, "23 earlier traceback lines cut") || strings.Contains(tb, "frame_0,") {
				t.Errorf("traceback not cut to its last lines: %q", tb)
			}
			// The neutral transcript: the chart's image is attached to its result.
			last := out.Messages[len(out.Messages)-2]
			if r := last.Parts[0].Result; r == nil || len(r.Images) != 1 || r.CallID != "call_chart" {
				t.Errorf("neutral transcript: chart result %+v", last.Parts[0])
			}
			reqs := srv.Requests()
			body := string(reqs[len(reqs)-1].Body)
			switch ac.api {
			case modeltest.Responses:
				// Reasoning items go back unchanged.
				if !strings.Contains(body, `"rs_fake_0"`) || !strings.Contains(body, `"rs_fake_2"`) {
					t.Errorf("reasoning items not sent back: %.500s", body)
				}
			case modeltest.Gemini:
				if !strings.Contains(body, `"sig_0_0"`) {
					t.Errorf("thought signature not sent back")
				}
			case modeltest.Anthropic:
				if !strings.Contains(body, `"is_error":true`) {
					t.Errorf("the KeyError result is not marked is_error")
				}
			}
		})
	}
}

// TestAdaptersMalformedCalls: arguments that are not JSON, an unknown
// tool, a call without an id and a duplicate id each get one readable tool
// error (or run), matched by id, and the conversation goes on.
func TestAdaptersMalformedCalls(t *testing.T) {
	for _, ac := range adapters {
		t.Run(string(ac.api), func(t *testing.T) {
			srv, out, _, err, m := runScript(t, ac, modeltest.MalformedScript())
			if err != nil {
				t.Fatalf("Run: %v (violations %v)", err, srv.Violations())
			}
			if out.Answer != "Done." {
				t.Errorf("answer %q", out.Answer)
			}
			if v := srv.Violations(); len(v) > 0 {
				t.Errorf("protocol violations: %v", v)
			}
			res := out.Messages[2]
			if len(res.Parts) != 5 {
				t.Fatalf("%d results for 5 calls", len(res.Parts))
			}
			calls := out.Messages[1].Calls()
			ids := map[string]bool{}
			for i, p := range res.Parts {
				if p.Result.CallID != calls[i].ID || calls[i].ID == "" || ids[calls[i].ID] {
					t.Errorf("result %d: id %q for call %q (ids must be unique and matched)", i, p.Result.CallID, calls[i].ID)
				}
				ids[calls[i].ID] = true
			}
			want := []struct {
				isErr bool
				text  string
			}{
				{true, "not a JSON object"},
				{true, `no tool named "shell"`},
				{false, "(the cell ran and printed nothing"},
				{false, "(the cell ran and printed nothing"},
				{false, "(the cell ran and printed nothing"},
			}
			for i, w := range want {
				r := res.Parts[i].Result
				if r.IsError != w.isErr || !strings.Contains(r.Text, w.text) {
					t.Errorf("result %d = %+v; want error=%v containing %q", i, r, w.isErr, w.text)
				}
			}
			if got := len(cellsRun(m)); got != 3 {
				t.Errorf("%d cells ran, want 3 (the malformed calls must not run)", got)
			}
		})
	}
}

// TestAdaptersRetry: 429 with Retry-After and a 503 are retried; a 400 is
// not, and is reported with the API's message.
func TestAdaptersRetry(t *testing.T) {
	for _, ac := range adapters {
		t.Run(string(ac.api), func(t *testing.T) {
			srv, out, _, err, _ := runScript(t, ac, modeltest.Script{{Text: "hi"}},
				modeltest.Fault{Status: http.StatusTooManyRequests, RetryAfter: "1"},
				modeltest.Fault{Status: http.StatusServiceUnavailable})
			if err != nil || out.Answer != "hi" {
				t.Fatalf("Run = %q, %v; want the answer after two retries", out.Answer, err)
			}
			if n := len(srv.Requests()); n != 1 {
				t.Errorf("%d requests reached the script, want 1", n)
			}

			srv, _, _, err, _ = runScript(t, ac, modeltest.Script{{Text: "hi"}},
				modeltest.Fault{Status: http.StatusBadRequest})
			var apiErr *agent.APIError
			if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Attempts != 1 || !strings.Contains(err.Error(), "scripted fault") {
				t.Fatalf("err = %v; want the 400 reported after one attempt", err)
			}
			_ = srv
		})
	}
}

// TestGeminiCallsWithoutIDs: Gemini models that send no call ids get
// responses matched by name and order, with no made-up ids on the wire.
func TestGeminiCallsWithoutIDs(t *testing.T) {
	script := modeltest.DefaultScript()
	for i := range script {
		for j := range script[i].Calls {
			script[i].Calls[j].ID = ""
		}
	}
	srv, out, _, err, _ := runScript(t, adapters[3], script)
	if err != nil || out.Answer != modeltest.Answer {
		t.Fatalf("Run = %q, %v (violations %v)", out.Answer, err, srv.Violations())
	}
	reqs := srv.Requests()
	if body := string(reqs[len(reqs)-1].Body); strings.Contains(body, "cellvm_call_") {
		t.Errorf("made-up ids sent to Gemini: %.300s", body)
	}
}
