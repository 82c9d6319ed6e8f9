package agent

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
)

// scripted is a Model that always asks for one more call.
type scripted struct{ turns int }

func (s *scripted) Generate(ctx context.Context, req Request) (Response, error) {
	s.turns++
	c := &ToolCall{ID: "same", Name: "noop"}
	ParseArgs(c, `{}`)
	return Response{Message: Message{Parts: []Part{TextPart("again"), {Type: PartToolCall, Call: c}}}}, nil
}

type noopTools struct{ calls int }

func (n *noopTools) Specs() []ToolSpec {
	return []ToolSpec{{Name: "noop", Schema: json.RawMessage(`{"type":"object"}`)}}
}
func (n *noopTools) Call(ctx context.Context, name string, args json.RawMessage) ToolResult {
	n.calls++
	return ToolResult{Text: "ok"}
}

func TestRunnerTurnCeiling(t *testing.T) {
	m, tools := &scripted{}, &noopTools{}
	r := Runner{Model: m, Tools: tools, MaxTurns: 3}
	out, err := r.Run(context.Background(), nil, "loop forever")
	if !errors.Is(err, ErrTurnLimit) || m.turns != 3 || tools.calls != 3 {
		t.Fatalf("err %v after %d turns and %d calls; want the turn limit after 3", err, m.turns, tools.calls)
	}
	// The history is consistent: every call has its result, and the model's
	// repeated id was replaced so each result matches exactly one call.
	seen := map[string]bool{}
	for i, msg := range out.Messages {
		for _, c := range msg.Calls() {
			if seen[c.ID] {
				t.Errorf("call id %s used twice", c.ID)
			}
			seen[c.ID] = true
			next := out.Messages[i+1]
			if next.Parts[0].Result == nil || next.Parts[0].Result.CallID != c.ID {
				t.Errorf("call %s not answered in the next message", c.ID)
			}
		}
	}
	if len(out.Messages) != 7 {
		t.Errorf("%d messages, want 7", len(out.Messages))
	}
}

type failingModel struct{}

func (failingModel) Generate(ctx context.Context, req Request) (Response, error) {
	return Response{}, &APIError{Provider: "x", Status: 401, Type: "authentication_error", Message: "bad key"}
}

func TestRunnerReportsModelError(t *testing.T) {
	r := Runner{Model: failingModel{}, Tools: &noopTools{}}
	_, err := r.Run(context.Background(), nil, "hi")
	var apiErr *APIError
	if !errors.As(err, &apiErr) || err.Error() != "model turn 1: x API: HTTP 401 authentication_error: bad key" {
		t.Errorf("err = %v", err)
	}
}
