// Package gemini adapts the agent loop to the Gemini API's function
// calling (POST {base}/v1beta/models/{model}:generateContent). Calls arrive
// as functionCall parts with an args object and, on newer models, an id;
// results go back as functionResponse parts in the next user turn, with
// the output under "output" (or "error"), and images as inlineData parts
// after them. Thought signatures are echoed on the parts that carried them,
// and thought parts are sent back unchanged, as the API requires.
package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/cellvm/cellvm/agent"
)

// Provider names this adapter in errors and opaque parts.
const Provider = "gemini"

const (
	DefaultBaseURL = "https://generativelanguage.googleapis.com"
	DefaultModel   = "gemini-2.5-flash"
)

// Model talks to generateContent.
type Model struct {
	APIKey    string
	BaseURL   string
	Model     string
	MaxTokens int
	Caller    *agent.Caller
}

type blob struct {
	MIMEType string `json:"mimeType"`
	Data     []byte `json:"data"`
}

type functionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

type functionResponse struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

type part struct {
	Text             string            `json:"text,omitempty"`
	InlineData       *blob             `json:"inlineData,omitempty"`
	FunctionCall     *functionCall     `json:"functionCall,omitempty"`
	FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
	ThoughtSignature string            `json:"thoughtSignature,omitempty"`
}

type content struct {
	Role  string            `json:"role"`
	Parts []json.RawMessage `json:"parts"`
}

type funcDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

type request struct {
	SystemInstruction *struct {
		Parts []part `json:"parts"`
	} `json:"systemInstruction,omitempty"`
	Contents []content `json:"contents"`
	Tools    []struct {
		FunctionDeclarations []funcDecl `json:"functionDeclarations"`
	} `json:"tools,omitempty"`
	GenerationConfig *struct {
		MaxOutputTokens int `json:"maxOutputTokens,omitempty"`
	} `json:"generationConfig,omitempty"`
}

type response struct {
	Candidates []struct {
		Content struct {
			Role  string            `json:"role"`
			Parts []json.RawMessage `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
}

// Generate sends one turn.
func (m *Model) Generate(ctx context.Context, req agent.Request) (agent.Response, error) {
	model := m.Model
	if model == "" {
		model = DefaultModel
	}
	body, err := EncodeRequest(req)
	if err != nil {
		return agent.Response{}, err
	}
	if m.MaxTokens > 0 {
		body.GenerationConfig = &struct {
			MaxOutputTokens int `json:"maxOutputTokens,omitempty"`
		}{m.MaxTokens}
	}
	base := m.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	h := http.Header{}
	h.Set("x-goog-api-key", m.APIKey)
	c := m.Caller
	if c == nil {
		c = &agent.Caller{Provider: Provider}
	}
	u := strings.TrimRight(base, "/") + "/v1beta/models/" + url.PathEscape(model) + ":generateContent"
	var resp response
	if err := c.PostJSON(ctx, u, h, body, &resp); err != nil {
		return agent.Response{}, err
	}
	if len(resp.Candidates) == 0 {
		reason := "no candidates"
		if resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
			reason = "the prompt was blocked: " + resp.PromptFeedback.BlockReason
		}
		return agent.Response{}, &agent.APIError{Provider: Provider, Status: 200, Message: reason}
	}
	cand := resp.Candidates[0]
	msg, err := DecodeParts(cand.Content.Parts)
	if err != nil {
		return agent.Response{}, &agent.APIError{Provider: Provider, Status: 200, Message: err.Error()}
	}
	return agent.Response{Message: msg, StopReason: cand.FinishReason}, nil
}

// EncodeRequest builds the wire request from the neutral conversation.
func EncodeRequest(req agent.Request) (request, error) {
	var r request
	if req.System != "" {
		r.SystemInstruction = &struct {
			Parts []part `json:"parts"`
		}{Parts: []part{{Text: req.System}}}
	}
	if len(req.Tools) > 0 {
		var decls []funcDecl
		for _, t := range req.Tools {
			schema, err := openAPISchema(t.Schema)
			if err != nil {
				return r, fmt.Errorf("tool %s: %w", t.Name, err)
			}
			decls = append(decls, funcDecl{Name: t.Name, Description: t.Description, Parameters: schema})
		}
		r.Tools = append(r.Tools, struct {
			FunctionDeclarations []funcDecl `json:"functionDeclarations"`
		}{decls})
	}
	for _, msg := range req.Messages {
		c := content{Role: "user"}
		if msg.Role == agent.RoleAssistant {
			c.Role = "model"
		}
		var images []part
		for _, p := range msg.Parts {
			var wp *part
			switch p.Type {
			case agent.PartText:
				if p.Text != "" || p.Signature != "" {
					wp = &part{Text: p.Text, ThoughtSignature: p.Signature}
				}
			case agent.PartImage:
				wp = &part{InlineData: &blob{MIMEType: p.Image.MIME, Data: p.Image.Data}}
			case agent.PartToolCall:
				fc := &functionCall{Name: p.Call.Name, Args: p.Call.ArgsObject()}
				if !p.Call.IDAssigned {
					fc.ID = p.Call.ID
				}
				wp = &part{FunctionCall: fc, ThoughtSignature: p.Signature}
			case agent.PartToolResult:
				res := p.Result
				fr := &functionResponse{Name: res.Name, Response: map[string]any{}}
				if res.IsError {
					fr.Response["error"] = res.Text
				} else {
					fr.Response["output"] = res.Text
				}
				if !assigned(req.Messages, res.CallID) {
					fr.ID = res.CallID
				}
				wp = &part{FunctionResponse: fr}
				for _, img := range res.Images {
					images = append(images, part{InlineData: &blob{MIMEType: img.MIME, Data: img.Data}})
				}
			case agent.PartOpaque:
				if p.Opaque != nil && p.Opaque.Provider == Provider {
					c.Parts = append(c.Parts, p.Opaque.Raw)
				}
			}
			if wp != nil {
				raw, err := json.Marshal(wp)
				if err != nil {
					return r, err
				}
				c.Parts = append(c.Parts, raw)
			}
		}
		// Images go after all function responses of the turn: the API
		// wants the responses together, in the order of the calls.
		for _, img := range images {
			raw, err := json.Marshal(img)
			if err != nil {
				return r, err
			}
			c.Parts = append(c.Parts, raw)
		}
		if len(c.Parts) > 0 {
			r.Contents = append(r.Contents, c)
		}
	}
	return r, nil
}

// assigned reports whether the call with that id got its id from the loop
// rather than the model; such ids are not sent to the API.
func assigned(msgs []agent.Message, id string) bool {
	for _, m := range msgs {
		for _, c := range m.Calls() {
			if c.ID == id {
				return c.IDAssigned
			}
		}
	}
	return false
}

// openAPISchema drops what the API's OpenAPI-subset "parameters" schema
// does not take (additionalProperties), keeping the rest.
func openAPISchema(raw json.RawMessage) (json.RawMessage, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	var strip func(any)
	strip = func(x any) {
		switch t := x.(type) {
		case map[string]any:
			delete(t, "additionalProperties")
			for _, e := range t {
				strip(e)
			}
		case []any:
			for _, e := range t {
				strip(e)
			}
		}
	}
	strip(v)
	return json.Marshal(v)
}

// DecodeParts turns the candidate's parts into a neutral assistant
// message. Thought parts and parts it does not know are kept opaque.
func DecodeParts(parts []json.RawMessage) (agent.Message, error) {
	msg := agent.Message{Role: agent.RoleAssistant}
	for _, raw := range parts {
		var p struct {
			Text         *string `json:"text"`
			Thought      bool    `json:"thought"`
			FunctionCall *struct {
				ID   string          `json:"id"`
				Name string          `json:"name"`
				Args json.RawMessage `json:"args"`
			} `json:"functionCall"`
			ThoughtSignature string `json:"thoughtSignature"`
		}
		if err := json.Unmarshal(raw, &p); err != nil {
			return msg, fmt.Errorf("part is not a JSON object: %w", err)
		}
		switch {
		case p.FunctionCall != nil:
			c := &agent.ToolCall{ID: p.FunctionCall.ID, Name: p.FunctionCall.Name}
			args := string(p.FunctionCall.Args)
			if args == "null" {
				args = ""
			}
			agent.ParseArgs(c, args)
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartToolCall, Call: c, Signature: p.ThoughtSignature})
		case p.Text != nil && !p.Thought:
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartText, Text: *p.Text, Signature: p.ThoughtSignature})
		default:
			msg.Parts = append(msg.Parts, agent.Part{Type: agent.PartOpaque, Opaque: &agent.Opaque{Provider: Provider, Raw: append(json.RawMessage(nil), raw...)}})
		}
	}
	return msg, nil
}
