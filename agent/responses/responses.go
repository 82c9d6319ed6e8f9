// Package responses adapts the agent loop to OpenAI's Responses API
// (POST {base}/responses). The conversation is a flat list of items: user
// and assistant messages, function_call items (arguments as a JSON string)
// and function_call_output items matched to them by call_id. An output can
// be an array of input_text and input_image parts, so figures go back
// attached to the call that made them. Items the loop does not interpret
// (reasoning) are sent back unchanged.
package responses

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
const Provider = "openai-responses"

const DefaultModel = "gpt-4.1"

// Model talks to a Responses endpoint.
type Model struct {
	APIKey string
	// BaseURL includes the version path ("https://api.openai.com/v1").
	BaseURL   string
	Model     string
	MaxTokens int
	Caller    *agent.Caller
}

type inputPart struct {
	Type     string `json:"type"`
	Text     string `json:"text,omitempty"`
	ImageURL string `json:"image_url,omitempty"`
}

type item struct {
	Type string `json:"type"`
	// message
	Role    string      `json:"role,omitempty"`
	Content []inputPart `json:"content,omitempty"`
	// function_call and function_call_output
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Output    any    `json:"output,omitempty"`
}

type toolDef struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type request struct {
	Model           string            `json:"model"`
	Instructions    string            `json:"instructions,omitempty"`
	Input           []json.RawMessage `json:"input"`
	Tools           []toolDef         `json:"tools,omitempty"`
	MaxOutputTokens int               `json:"max_output_tokens,omitempty"`
}

type response struct {
	ID     string            `json:"id"`
	Status string            `json:"status"`
	Output []json.RawMessage `json:"output"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
}

// Generate sends one turn.
func (m *Model) Generate(ctx context.Context, req agent.Request) (agent.Response, error) {
	model := m.Model
	if model == "" {
		model = DefaultModel
	}
	body, err := EncodeRequest(model, req)
	if err != nil {
		return agent.Response{}, err
	}
	body.MaxOutputTokens = m.MaxTokens
	h := http.Header{}
	if m.APIKey != "" {
		h.Set("Authorization", "Bearer "+m.APIKey)
	}
	base := m.BaseURL
	if base == "" {
		base = "https://api.openai.com/v1"
	}
	c := m.Caller
	if c == nil {
		c = &agent.Caller{Provider: Provider}
	}
	var resp response
	if err := c.PostJSON(ctx, strings.TrimRight(base, "/")+"/responses", h, body, &resp); err != nil {
		return agent.Response{}, err
	}
	if resp.Status == "failed" && resp.Error != nil {
		return agent.Response{}, &agent.APIError{Provider: Provider, Status: 200, Type: resp.Error.Code, Message: resp.Error.Message}
	}
	msg, err := DecodeOutput(resp.Output)
	if err != nil {
		return agent.Response{}, &agent.APIError{Provider: Provider, Status: 200, Message: err.Error()}
	}
	stop := resp.Status
	if resp.IncompleteDetails != nil && resp.IncompleteDetails.Reason != "" {
		stop = resp.Status + ": " + resp.IncompleteDetails.Reason
	}
	return agent.Response{Message: msg, StopReason: stop}, nil
}

func dataURL(img agent.Image) string {
	return "data:" + img.MIME + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
}

func appendItem(r *request, it item) error {
	raw, err := json.Marshal(it)
	if err != nil {
		return err
	}
	r.Input = append(r.Input, raw)
	return nil
}

// EncodeRequest builds the wire request from the neutral conversation.
func EncodeRequest(model string, req agent.Request) (request, error) {
	r := request{Model: model, Instructions: req.System}
	for _, t := range req.Tools {
		r.Tools = append(r.Tools, toolDef{Type: "function", Name: t.Name, Description: t.Description, Parameters: t.Schema})
	}
	for _, msg := range req.Messages {
		var user []inputPart
		for _, p := range msg.Parts {
			var it *item
			switch p.Type {
			case agent.PartText:
				if p.Text == "" {
					continue
				}
				if msg.Role == agent.RoleAssistant {
					it = &item{Type: "message", Role: "assistant", Content: []inputPart{{Type: "output_text", Text: p.Text}}}
				} else {
					user = append(user, inputPart{Type: "input_text", Text: p.Text})
				}
			case agent.PartImage:
				user = append(user, inputPart{Type: "input_image", ImageURL: dataURL(*p.Image)})
			case agent.PartToolCall:
				it = &item{Type: "function_call", CallID: p.Call.ID, Name: p.Call.Name, Arguments: p.Call.ArgsText()}
			case agent.PartToolResult:
				it = &item{Type: "function_call_output", CallID: p.Result.CallID, Output: output(p.Result)}
			case agent.PartOpaque:
				if p.Opaque != nil && p.Opaque.Provider == Provider {
					r.Input = append(r.Input, p.Opaque.Raw)
				}
			}
			if it != nil {
				if err := appendItem(&r, *it); err != nil {
					return r, err
				}
			}
		}
		if len(user) > 0 {
			if err := appendItem(&r, item{Type: "message", Role: "user", Content: user}); err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// output is a function_call_output's output: a string, or input_text and
// input_image parts when the call produced images.
func output(res *agent.ToolResult) any {
	text := res.Text
	if text == "" {
		text = "(no output)"
	}
	if res.IsError && !strings.HasPrefix(text, "Tool error") {
		text = "Error:\n" + text
	}
	if len(res.Images) == 0 {
		return text
	}
	parts := []inputPart{{Type: "input_text", Text: text}}
	for _, img := range res.Images {
		parts = append(parts, inputPart{Type: "input_image", ImageURL: dataURL(img)})
	}
	return parts
}

// DecodeOutput turns the response's output items into a neutral assistant
// message; items it does not interpret are kept opaque.
func DecodeOutput(output []json.RawMessage) (agent.Message, error) {
	msg := agent.Message{Role: agent.RoleAssistant}
	for _, raw := range output {
		var it struct {
			Type    string `json:"type"`
			Content []struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Refusal string `json:"refusal"`
			} `json:"content"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if err := json.Unmarshal(raw, &it); err != nil {
			return msg, fmt.Errorf("output item is not a JSON object: %w", err)
		}
		switch it.Type {
		case "message":
			var b strings.Builder
			for _, c := range it.Content {
				switch c.Type {
				case "output_text":
					b.WriteString(c.Text)
				case "refusal":
					b.WriteString(c.Refusal)
				}
			}
			if b.Len() > 0 {
				msg.Parts = append(msg.Parts, agent.TextPart(b.String()))
			}
		case "function_call":
			c := &agent.ToolCall{ID: it.CallID, Name: it.Name}
			agent.ParseArgs(c, argumentsText(it.Arguments))
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartToolCall, Call: c})
		default:
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartOpaque, Opaque: &agent.Opaque{Provider: Provider, Raw: append(json.RawMessage(nil), raw...)}})
		}
	}
	return msg, nil
}

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
