// Package openai adapts the agent loop to OpenAI's Chat Completions API
// (POST {base}/chat/completions), which most OpenAI-compatible servers
// also speak. Tool calls arrive in the assistant message's tool_calls with
// their arguments as a JSON string, which may not parse; results go back as
// role "tool" messages, one per call. A tool message can only carry text,
// so images follow in one user message after the tool messages, each
// introduced by the id of the call that made it.
package openai

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/cellvm/cellvm/agent"
)

// Provider names this adapter in errors.
const Provider = "openai"

const (
	DefaultBaseURL = "https://api.openai.com/v1"
	DefaultModel   = "gpt-4.1"
)

// Model talks to a Chat Completions endpoint.
type Model struct {
	APIKey string
	// BaseURL includes the version path ("https://api.openai.com/v1",
	// "http://localhost:8000/v1").
	BaseURL string
	Model   string
	// MaxTokens, when set, is sent as max_completion_tokens.
	MaxTokens int
	Caller    *agent.Caller
}

type contentPart struct {
	Type     string    `json:"type"`
	Text     string    `json:"text,omitempty"`
	ImageURL *imageURL `json:"image_url,omitempty"`
}

type imageURL struct {
	URL string `json:"url"`
}

type function struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type toolCall struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function function `json:"function"`
}

type message struct {
	Role       string     `json:"role"`
	Content    any        `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolDef struct {
	Type     string  `json:"type"`
	Function funcDef `json:"function"`
}

type funcDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type request struct {
	Model               string    `json:"model"`
	Messages            []message `json:"messages"`
	Tools               []toolDef `json:"tools,omitempty"`
	MaxCompletionTokens int       `json:"max_completion_tokens,omitempty"`
}

type response struct {
	Choices []struct {
		Message struct {
			Role      string `json:"role"`
			Content   any    `json:"content"`
			Refusal   string `json:"refusal"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// Generate sends one turn.
func (m *Model) Generate(ctx context.Context, req agent.Request) (agent.Response, error) {
	model := m.Model
	if model == "" {
		model = DefaultModel
	}
	body := EncodeRequest(model, req)
	body.MaxCompletionTokens = m.MaxTokens
	h := http.Header{}
	if m.APIKey != "" {
		h.Set("Authorization", "Bearer "+m.APIKey)
	}
	base := m.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	c := m.Caller
	if c == nil {
		c = &agent.Caller{Provider: Provider}
	}
	var resp response
	if err := c.PostJSON(ctx, strings.TrimRight(base, "/")+"/chat/completions", h, body, &resp); err != nil {
		return agent.Response{}, err
	}
	if len(resp.Choices) == 0 {
		return agent.Response{}, &agent.APIError{Provider: Provider, Status: 200, Message: "the response has no choices"}
	}
	ch := resp.Choices[0]
	msg := agent.Message{Role: agent.RoleAssistant}
	if text := contentText(ch.Message.Content); text != "" {
		msg.Parts = append(msg.Parts, agent.TextPart(text))
	} else if ch.Message.Refusal != "" {
		msg.Parts = append(msg.Parts, agent.TextPart(ch.Message.Refusal))
	}
	for _, tc := range ch.Message.ToolCalls {
		c := &agent.ToolCall{ID: tc.ID, Name: tc.Function.Name}
		agent.ParseArgs(c, argumentsText(tc.Function.Arguments))
		msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartToolCall, Call: c})
	}
	return agent.Response{Message: msg, StopReason: ch.FinishReason}, nil
}

// argumentsText reads "arguments", which the API sends as a JSON string;
// some compatible servers send the object itself.
func argumentsText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// contentText reads content given as a string or as an array of parts.
func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				if t, ok := m["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		return b.String()
	}
	return ""
}

func dataURL(img agent.Image) string {
	return "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}

// EncodeRequest builds the wire request from the neutral conversation.
func EncodeRequest(model string, req agent.Request) request {
	r := request{Model: model}
	if req.System != "" {
		r.Messages = append(r.Messages, message{Role: "system", Content: req.System})
	}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, toolDef{Type: "function", Function: funcDef{Name: t.Name, Description: t.Description, Parameters: t.Schema}})
	}
	for _, msg := range req.Messages {
		if msg.Role == agent.RoleAssistant {
			am := message{Role: "assistant"}
			if text := msg.Text(); text != "" {
				am.Content = text
			}
			for _, c := range msg.Calls() {
				am.ToolCalls = append(am.ToolCalls, toolCall{ID: c.ID, Type: "function", Function: function{Name: c.Name, Arguments: c.ArgsText()}})
			}
			if am.Content == nil && len(am.ToolCalls) == 0 {
				am.Content = ""
			}
			r.Messages = append(r.Messages, am)
			continue
		}
		// A user-side turn: tool messages first (they must directly follow
		// the assistant message that made the calls), then one user
		// message with any text and images.
		var user []contentPart
		for _, p := range msg.Parts {
			switch p.Type {
			case agent.PartToolResult:
				res := p.Result
				text := res.Text
				if res.IsError && !strings.HasPrefix(text, "Tool error") {
					text = "Error:\n" + text
				}
				if len(res.Images) > 0 {
					text += fmt.Sprintf("\n[%d image(s) from this call follow in the next user message]", len(res.Images))
				}
				r.Messages = append(r.Messages, message{Role: "tool", ToolCallID: res.CallID, Content: text})
				if len(res.Images) > 0 {
					user = append(user, contentPart{Type: "text", Text: fmt.Sprintf("Images produced by tool call %s (%s):", res.CallID, res.Name)})
					for _, img := range res.Images {
						user = append(user, contentPart{Type: "image_url", ImageURL: &imageURL{URL: dataURL(img)}})
					}
				}
			case agent.PartText:
				if p.Text != "" {
					user = append(user, contentPart{Type: "text", Text: p.Text})
				}
			case agent.PartImage:
				user = append(user, contentPart{Type: "image_url", ImageURL: &imageURL{URL: dataURL(*p.Image)}})
			}
		}
		switch {
		case len(user) == 1 && user[0].Type == "text":
			r.Messages = append(r.Messages, message{Role: "user", Content: user[0].Text})
		case len(user) > 0:
			r.Messages = append(r.Messages, message{Role: "user", Content: user})
		}
	}
	return r
}
