package agent

import (
	"encoding/json"
)

// Role says who wrote a message.
type Role string

const (
	// RoleUser is the person and, in the neutral form, tool results too:
	// every API but Gemini's carries tool results in a user-side turn, and
	// Gemini's "function" role is an adapter detail.
	RoleUser Role = "user"
	// RoleAssistant is the model.
	RoleAssistant Role = "assistant"
)

// PartType names what a Part holds.
type PartType string

const (
	PartText       PartType = "text"
	PartImage      PartType = "image"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
	// PartOpaque is provider content the loop does not interpret but must
	// send back unchanged (Anthropic thinking blocks, Responses reasoning
	// items). Only the adapter of the same provider sends it back.
	PartOpaque PartType = "opaque"
)

// Message is one turn of a conversation in provider-neutral form.
type Message struct {
	Role  Role   `json:"role"`
	Parts []Part `json:"parts"`
}

// Part is one piece of a message. Exactly the field named by Type is set.
type Part struct {
	Type   PartType    `json:"type"`
	Text   string      `json:"text,omitempty"`
	Image  *Image      `json:"image,omitempty"`
	Call   *ToolCall   `json:"call,omitempty"`
	Result *ToolResult `json:"result,omitempty"`
	Opaque *Opaque     `json:"opaque,omitempty"`
	// Signature is a provider token that must be echoed with this part
	// (Gemini's thoughtSignature on text and function-call parts).
	Signature string `json:"signature,omitempty"`
}

// Image is image content. Data is the raw bytes (base64 in JSON).
type Image struct {
	MIME string `json:"mime"`
	Data []byte `json:"data"`
}

// ToolCall is a model's request to run a tool.
type ToolCall struct {
	// ID matches the call to its result. The loop gives calls that arrive
	// without one (or with a duplicate) a fresh ID before anything else
	// sees them, and the adapters send that ID back in both places.
	ID string `json:"id"`
	// IDAssigned says the loop made up ID because the model sent none or a
	// duplicate; an API whose calls need no ID (Gemini) then omits it.
	IDAssigned bool   `json:"id_assigned,omitempty"`
	Name       string `json:"name"`
	// Args is the arguments as JSON when they parsed as a JSON object.
	Args json.RawMessage `json:"args,omitempty"`
	// RawArgs is the argument text exactly as the model sent it, kept so
	// that history repeats what the model wrote even when it is not JSON.
	RawArgs string `json:"raw_args,omitempty"`
	// ArgsError says why the arguments could not be used; the loop then
	// answers the call with a tool error instead of running it.
	ArgsError string `json:"args_error,omitempty"`
}

// ToolResult is the answer to one ToolCall.
type ToolResult struct {
	CallID  string  `json:"call_id"`
	Name    string  `json:"name"`
	Text    string  `json:"text"`
	Images  []Image `json:"images,omitempty"`
	IsError bool    `json:"is_error,omitempty"`
}

// Opaque is provider content kept verbatim.
type Opaque struct {
	Provider string          `json:"provider"`
	Raw      json.RawMessage `json:"raw"`
}

// TextPart returns a text part.
func TextPart(s string) Part { return Part{Type: PartText, Text: s} }

// UserText returns a user message holding one text part.
func UserText(s string) Message { return Message{Role: RoleUser, Parts: []Part{TextPart(s)}} }

// Text returns the message's text parts joined with newlines.
func (m Message) Text() string {
	var s string
	for _, p := range m.Parts {
		if p.Type == PartText && p.Text != "" {
			if s != "" {
				s += "\n"
			}
			s += p.Text
		}
	}
	return s
}

// Calls returns the message's tool calls in order.
func (m Message) Calls() []*ToolCall {
	var cs []*ToolCall
	for i := range m.Parts {
		if m.Parts[i].Type == PartToolCall && m.Parts[i].Call != nil {
			cs = append(cs, m.Parts[i].Call)
		}
	}
	return cs
}

// ParseArgs turns the argument text a model sent into a ToolCall's Args,
// RawArgs and ArgsError. Empty text means no arguments ({}).
func ParseArgs(c *ToolCall, raw string) {
	c.RawArgs = raw
	if raw == "" {
		c.Args = json.RawMessage("{}")
		return
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &obj); err != nil {
		c.ArgsError = "the arguments are not a JSON object: " + err.Error()
		return
	}
	if obj == nil {
		c.ArgsError = "the arguments are null, not a JSON object"
		return
	}
	c.Args = json.RawMessage(raw)
}

// ArgsText is the argument text to send back in history: what the model
// wrote, or "{}" when that was empty.
func (c *ToolCall) ArgsText() string {
	if c.RawArgs != "" {
		return c.RawArgs
	}
	if len(c.Args) > 0 {
		return string(c.Args)
	}
	return "{}"
}

// ArgsObject is the arguments as a JSON object for APIs that carry them as
// an object (Anthropic, Gemini): the parsed arguments, or {} when they did
// not parse (the tool result says what was wrong).
func (c *ToolCall) ArgsObject() json.RawMessage {
	if len(c.Args) > 0 && c.ArgsError == "" {
		return c.Args
	}
	return json.RawMessage("{}")
}
