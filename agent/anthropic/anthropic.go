// Package anthropic adapts the agent loop to Anthropic's Messages API
// (POST /v1/messages). Tool calls arrive as tool_use blocks with an input
// object; results go back as tool_result blocks in the next user message,
// and a tool_result can hold image blocks, so figures reach the model as
// images attached to the call that made them. Blocks the loop does not
// interpret (thinking, redacted_thinking) are sent back unchanged.
package anthropic

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellvm/cellvm/agent"
)

// Provider names this adapter in errors and opaque parts.
const Provider = "anthropic"

// DefaultBaseURL is the API's address; DefaultModel the model used when
// none is given.
const (
	DefaultBaseURL = "https://api.anthropic.com"
	DefaultModel   = "claude-sonnet-4-5"
	APIVersion     = "2023-06-01"
)

// Model talks to the Messages API.
type Model struct {
	APIKey    string
	BaseURL   string
	Model     string
	MaxTokens int
	Caller    *agent.Caller
}

type block struct {
	Type string `json:"type"`
	// text
	Text string `json:"text,omitempty"`
	// image
	Source *imageSource `json:"source,omitempty"`
	// tool_use
	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	// tool_result
	ToolUseID string  `json:"tool_use_id,omitempty"`
	Content   []block `json:"content,omitempty"`
	IsError   bool    `json:"is_error,omitempty"`
}

type imageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

type message struct {
	Role    string            `json:"role"`
	Content []json.RawMessage `json:"content"`
}

type tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type request struct {
	Model     string    `json:"model"`
	MaxTokens int       `json:"max_tokens"`
	System    string    `json:"system,omitempty"`
	Messages  []message `json:"messages"`
	Tools     []tool    `json:"tools,omitempty"`
}

type response struct {
	ID         string            `json:"id"`
	Type       string            `json:"type"`
	Role       string            `json:"role"`
	Content    []json.RawMessage `json:"content"`
	StopReason string            `json:"stop_reason"`
}

// Generate sends one turn.
func (m *Model) Generate(ctx context.Context, req agent.Request) (agent.Response, error) {
	body, err := EncodeRequest(m.modelName(), m.maxTokens(), req)
	if err != nil {
		return agent.Response{}, err
	}
	h := http.Header{}
	h.Set("x-api-key", m.APIKey)
	h.Set("anthropic-version", APIVersion)
	var resp response
	c := m.caller()
	if err := c.PostJSON(ctx, strings.TrimRight(m.baseURL(), "/")+"/v1/messages", h, body, &resp); err != nil {
		return agent.Response{}, err
	}
	msg, err := DecodeContent(resp.Content)
	if err != nil {
		return agent.Response{}, &agent.APIError{Provider: Provider, Status: 200, Message: err.Error()}
	}
	return agent.Response{Message: msg, StopReason: resp.StopReason}, nil
}

func (m *Model) caller() *agent.Caller {
	if m.Caller != nil {
		return m.Caller
	}
	return &agent.Caller{Provider: Provider}
}

func (m *Model) baseURL() string {
	if m.BaseURL != "" {
		return m.BaseURL
	}
	return DefaultBaseURL
}

func (m *Model) modelName() string {
	if m.Model != "" {
		return m.Model
	}
	return DefaultModel
}

func (m *Model) maxTokens() int {
	if m.MaxTokens > 0 {
		return m.MaxTokens
	}
	return 4096
}

// EncodeRequest builds the wire request from the neutral conversation.
func EncodeRequest(model string, maxTokens int, req agent.Request) (any, error) {
	r := request{Model: model, MaxTokens: maxTokens, System: req.System}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, tool{Name: t.Name, Description: t.Description, InputSchema: t.Schema})
	}
	for _, msg := range req.Messages {
		wm := message{Role: "user"}
		if msg.Role == agent.RoleAssistant {
			wm.Role = "assistant"
		}
		for _, p := range msg.Parts {
			b, ok, err := encodePart(p)
			if err != nil {
				return nil, err
			}
			if ok {
				wm.Content = append(wm.Content, b)
			}
		}
		if len(wm.Content) == 0 {
			continue
		}
		r.Messages = append(r.Messages, wm)
	}
	return r, nil
}

func imageBlock(img agent.Image) block {
	return block{Type: "image", Source: &imageSource{Type: "base64", MediaType: img.MIME, Data: base64.StdEncoding.EncodeToString(img.Data)}}
}

func encodePart(p agent.Part) (json.RawMessage, bool, error) {
	var b block
	switch p.Type {
	case agent.PartText:
		if p.Text == "" {
			return nil, false, nil // the API refuses empty text blocks
		}
		b = block{Type: "text", Text: p.Text}
	case agent.PartImage:
		b = imageBlock(*p.Image)
	case agent.PartToolCall:
		b = block{Type: "tool_use", ID: p.Call.ID, Name: p.Call.Name, Input: p.Call.ArgsObject()}
	case agent.PartToolResult:
		r := p.Result
		b = block{Type: "tool_result", ToolUseID: r.CallID, IsError: r.IsError}
		text := r.Text
		if text == "" {
			text = "(no output)"
		}
		b.Content = append(b.Content, block{Type: "text", Text: text})
		for _, img := range r.Images {
			b.Content = append(b.Content, imageBlock(img))
		}
	case agent.PartOpaque:
		if p.Opaque == nil || p.Opaque.Provider != Provider {
			return nil, false, nil
		}
		return p.Opaque.Raw, true, nil
	default:
		return nil, false, nil
	}
	raw, err := json.Marshal(b)
	return raw, err == nil, err
}

// DecodeContent turns the response's content blocks into a neutral
// assistant message. It never fails on a block it does not know: such
// blocks are kept opaque and sent back as they came.
func DecodeContent(content []json.RawMessage) (agent.Message, error) {
	msg := agent.Message{Role: agent.RoleAssistant}
	for _, raw := range content {
		var b struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(raw, &b); err != nil {
			return msg, fmt.Errorf("content block is not a JSON object: %w", err)
		}
		switch b.Type {
		case "text":
			msg.Parts = append(msg.Parts, agent.TextPart(b.Text))
		case "tool_use":
			c := &agent.ToolCall{ID: b.ID, Name: b.Name}
			agent.ParseArgs(c, string(b.Input))
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartToolCall, Call: c})
		default:
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartOpaque, Opaque: &agent.Opaque{Provider: Provider, Raw: append(json.RawMessage(nil), raw...)}})
		}
	}
	return msg, nil
}
