// Package agent is cellvm's language-model tool loop: the tools a model is
// offered (run_python and its companions), the way a cell's result is turned
// into something a model can act on, and the loop that carries a question
// through model turns and tool calls to an answer.
//
// The loop is written once, against a provider-neutral conversation
// (Message, Part, ToolCall, ToolResult) and a small Model interface. Each
// model API (Anthropic Messages, OpenAI Chat Completions, OpenAI Responses,
// Gemini) is an adapter in its own subpackage that only translates between
// the neutral form and its wire format, so the rules that matter — every
// tool call gets exactly one result matched by id, malformed calls become
// tool errors the model can read, the assistant's whole content goes back
// into history — are enforced in one place and tested once.
//
// Everything runs against sandbox.Manager, so the same code drives sandboxes
// embedded in the process, a remote daemon, or a fake in tests.
package agent
