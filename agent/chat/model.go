// Package chat is `cellvm chat`: one question carried through the agent
// loop against a sandbox, with tool calls and results printed as they
// happen, images saved to files, and, for a named conversation, the
// sandbox and history kept between invocations. The command in
// cmd/cellvm only parses flags and picks the sandbox backend.
package chat

import (
	"fmt"

	"github.com/cellvm/cellvm/agent"
	"github.com/cellvm/cellvm/agent/anthropic"
	"github.com/cellvm/cellvm/agent/gemini"
	"github.com/cellvm/cellvm/agent/openai"
	"github.com/cellvm/cellvm/agent/responses"
)

// Providers are the names --provider takes.
var Providers = []string{"anthropic", "openai", "responses", "gemini"}

// ModelFromEnv builds the model for provider ("" or "auto" picks by which
// key is set: ANTHROPIC_API_KEY, then OPENAI_API_KEY, then GEMINI_API_KEY)
// with keys and base URLs from env: ANTHROPIC_BASE_URL, OPENAI_BASE_URL
// (any OpenAI-compatible server; its key may be empty), GEMINI_BASE_URL.
// It returns the model and the provider chosen.
func ModelFromEnv(provider, model string, maxTokens int, getenv func(string) string) (agent.Model, string, error) {
	if provider == "" || provider == "auto" {
		switch {
		case getenv("ANTHROPIC_API_KEY") != "":
			provider = "anthropic"
		case getenv("OPENAI_API_KEY") != "" || getenv("OPENAI_BASE_URL") != "":
			provider = "openai"
		case getenv("GEMINI_API_KEY") != "":
			provider = "gemini"
		default:
			return nil, "", fmt.Errorf("no model API key: set ANTHROPIC_API_KEY, or OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible server), or GEMINI_API_KEY")
		}
	}
	caller := &agent.Caller{Provider: provider}
	switch provider {
	case "anthropic":
		if getenv("ANTHROPIC_API_KEY") == "" {
			return nil, "", fmt.Errorf("--provider anthropic needs ANTHROPIC_API_KEY")
		}
		return &anthropic.Model{APIKey: getenv("ANTHROPIC_API_KEY"), BaseURL: getenv("ANTHROPIC_BASE_URL"), Model: model, MaxTokens: maxTokens, Caller: caller}, provider, nil
	case "openai", "responses":
		key, base := getenv("OPENAI_API_KEY"), getenv("OPENAI_BASE_URL")
		if key == "" && base == "" {
			return nil, "", fmt.Errorf("--provider %s needs OPENAI_API_KEY (or OPENAI_BASE_URL for a server without keys)", provider)
		}
		if provider == "responses" {
			return &responses.Model{APIKey: key, BaseURL: base, Model: model, MaxTokens: maxTokens, Caller: caller}, provider, nil
		}
		return &openai.Model{APIKey: key, BaseURL: base, Model: model, MaxTokens: maxTokens, Caller: caller}, provider, nil
	case "gemini":
		if getenv("GEMINI_API_KEY") == "" {
			return nil, "", fmt.Errorf("--provider gemini needs GEMINI_API_KEY")
		}
		return &gemini.Model{APIKey: getenv("GEMINI_API_KEY"), BaseURL: getenv("GEMINI_BASE_URL"), Model: model, MaxTokens: maxTokens, Caller: caller}, provider, nil
	}
	return nil, "", fmt.Errorf("unknown provider %q (want auto, anthropic, openai, responses or gemini)", provider)
}
