package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Request is one model turn's input.
type Request struct {
	System   string
	Messages []Message
	Tools    []ToolSpec
}

// Response is one model turn's output: the assistant's whole message.
type Response struct {
	Message Message
	// StopReason is the provider's own word for why the turn ended.
	StopReason string
}

// Model is one model API behind an adapter. Generate sends the whole
// conversation and returns the next assistant message; transient failures
// are retried inside (see Caller), so an error here is final for the turn.
type Model interface {
	Generate(ctx context.Context, req Request) (Response, error)
}

// Tools is what the loop needs from a toolbox.
type Tools interface {
	Specs() []ToolSpec
	Call(ctx context.Context, name string, args json.RawMessage) ToolResult
}

// EventType names a loop event.
type EventType string

const (
	EventAssistantText EventType = "assistant_text"
	EventToolCall      EventType = "tool_call"
	EventToolResult    EventType = "tool_result"
)

// Event is reported as the loop runs, for a front end to print.
type Event struct {
	Type   EventType
	Turn   int
	Text   string
	Call   *ToolCall
	Result *ToolResult
}

// ErrTurnLimit: the model was still calling tools when the turn ceiling
// was reached.
var ErrTurnLimit = errors.New("turn limit reached")

// DefaultMaxTurns is the turn ceiling when Runner.MaxTurns is zero.
const DefaultMaxTurns = 25

// Runner carries a question through model turns and tool calls.
type Runner struct {
	Model  Model
	Tools  Tools
	System string
	// MaxTurns bounds the model turns of one Run.
	MaxTurns int
	// OnEvent, if set, is called for each event, in order, from Run's
	// goroutine.
	OnEvent func(Event)
}

// Outcome is what Run produced.
type Outcome struct {
	// Messages is the whole conversation: the history passed in, the
	// question, and every turn since. It is consistent even when Run
	// returns an error: every tool call in it has its result.
	Messages []Message
	// Answer is the text of the last assistant message.
	Answer string
	Turns  int
	Calls  int
	// StopReason is the provider's reason for the last turn's end.
	StopReason string
}

// DefaultSystem is the system prompt used when Runner.System is empty.
const DefaultSystem = "You answer questions by running Python in a sandbox with the run_python tool. " +
	"Work step by step like in a notebook: state persists between calls. " +
	"Read errors and fix your code. When you have the answer, reply in plain text without calling tools."

func (r *Runner) emit(e Event) {
	if r.OnEvent != nil {
		r.OnEvent(e)
	}
}

// Run appends question (if not empty) to history and runs turns until the
// model answers without calling tools, the turn ceiling is reached, the
// model API fails, or ctx ends.
func (r *Runner) Run(ctx context.Context, history []Message, question string) (Outcome, error) {
	out := Outcome{Messages: append([]Message(nil), history...)}
	if question != "" {
		out.Messages = append(out.Messages, UserText(question))
	}
	maxTurns := r.MaxTurns
	if maxTurns <= 0 {
		maxTurns = DefaultMaxTurns
	}
	system := r.System
	if system == "" {
		system = DefaultSystem
	}
	specs := r.Tools.Specs()
	seen := knownCallIDs(out.Messages)
	for turn := 1; ; turn++ {
		if turn > maxTurns {
			return out, fmt.Errorf("%w: the model still called tools after %d turns", ErrTurnLimit, maxTurns)
		}
		if err := ctx.Err(); err != nil {
			return out, err
		}
		resp, err := r.Model.Generate(ctx, Request{System: system, Messages: out.Messages, Tools: specs})
		if err != nil {
			return out, fmt.Errorf("model turn %d: %w", turn, err)
		}
		out.Turns = turn
		out.StopReason = resp.StopReason
		msg := resp.Message
		msg.Role = RoleAssistant
		assignCallIDs(&msg, turn, seen)
		out.Messages = append(out.Messages, msg)
		if text := msg.Text(); text != "" {
			out.Answer = text
			r.emit(Event{Type: EventAssistantText, Turn: turn, Text: text})
		} else {
			out.Answer = ""
		}
		calls := msg.Calls()
		if len(calls) == 0 {
			return out, nil
		}
		results := Message{Role: RoleUser}
		for _, c := range calls {
			r.emit(Event{Type: EventToolCall, Turn: turn, Call: c})
			res := r.call(ctx, c)
			out.Calls++
			r.emit(Event{Type: EventToolResult, Turn: turn, Call: c, Result: &res})
			results.Parts = append(results.Parts, Part{Type: PartToolResult, Result: &res})
		}
		out.Messages = append(out.Messages, results)
	}
}

// call runs one call, turning every way it can be malformed into a tool
// error the model reads.
func (r *Runner) call(ctx context.Context, c *ToolCall) ToolResult {
	var res ToolResult
	switch {
	case ctx.Err() != nil:
		res = ToolError("not run: the conversation was cancelled")
	case c.Name == "":
		res = ToolError("the tool call has no tool name; call one of the tools by name")
	case c.ArgsError != "":
		res = ToolError("could not use the arguments of this %s call: %s. Send the arguments as one JSON object that matches the tool's schema", clipName(c.Name), c.ArgsError)
	default:
		res = r.Tools.Call(ctx, c.Name, c.Args)
	}
	res.CallID = c.ID
	res.Name = c.Name
	return res
}

// knownCallIDs collects the call IDs already used in a conversation.
func knownCallIDs(msgs []Message) map[string]bool {
	seen := map[string]bool{}
	for _, m := range msgs {
		for _, c := range m.Calls() {
			seen[c.ID] = true
		}
	}
	return seen
}

// assignCallIDs gives every call without an ID, or with one already used,
// a fresh one, so each call can get exactly one result matched by ID.
func assignCallIDs(m *Message, turn int, seen map[string]bool) {
	n := 0
	for _, c := range m.Calls() {
		if c.ID != "" && !seen[c.ID] {
			seen[c.ID] = true
			continue
		}
		for {
			n++
			id := fmt.Sprintf("cellvm_call_%d_%d", turn, n)
			if !seen[id] {
				c.ID = id
				c.IDAssigned = true
				seen[id] = true
				break
			}
		}
	}
}
