package modeltest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// raw JSON helpers: the fake reads requests loosely, the way a server
// would, and reports shapes it cannot read as violations.
type obj = map[string]json.RawMessage

func str(o obj, k string) string {
	var s string
	json.Unmarshal(o[k], &s)
	return s
}

func list(raw json.RawMessage) []obj {
	var l []obj
	json.Unmarshal(raw, &l)
	return l
}

func parse(api API, body []byte) ([]Turn, []string, []string) {
	var req obj
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, nil, []string{"the body is not a JSON object: " + err.Error()}
	}
	switch api {
	case Anthropic:
		return parseAnthropic(req)
	case OpenAI:
		return parseOpenAI(req)
	case Responses:
		return parseResponses(req)
	default:
		return parseGemini(req)
	}
}

func toolNames(raw json.RawMessage, path ...string) []string {
	var names []string
	for _, t := range list(raw) {
		o := t
		for _, p := range path {
			json.Unmarshal(t[p], &o)
		}
		names = append(names, str(o, "name"))
	}
	return names
}

func parseAnthropic(req obj) ([]Turn, []string, []string) {
	var turns []Turn
	var bad []string
	for i, m := range list(req["messages"]) {
		t := Turn{Role: str(m, "role")}
		var s string
		if json.Unmarshal(m["content"], &s) == nil {
			t.Text = s
			turns = append(turns, t)
			continue
		}
		sawOther := false
		for _, b := range list(m["content"]) {
			switch str(b, "type") {
			case "text":
				t.Text += str(b, "text")
				sawOther = true
			case "image":
				t.Images++
				sawOther = true
			case "tool_use":
				t.Calls = append(t.Calls, WireCall{ID: str(b, "id"), Name: str(b, "name"), Args: string(b["input"])})
			case "tool_result":
				if sawOther {
					bad = append(bad, fmt.Sprintf("message %d: tool_result blocks must come first", i))
				}
				r := WireResult{ID: str(b, "tool_use_id")}
				json.Unmarshal(b["is_error"], &r.IsError)
				var cs string
				if json.Unmarshal(b["content"], &cs) == nil {
					r.Text = cs
				}
				for _, c := range list(b["content"]) {
					switch str(c, "type") {
					case "text":
						r.Text += str(c, "text")
					case "image":
						r.Images++
					}
				}
				t.Results = append(t.Results, r)
			default:
				sawOther = true
			}
		}
		turns = append(turns, t)
	}
	return turns, toolNames(req["tools"]), bad
}

func parseOpenAI(req obj) ([]Turn, []string, []string) {
	var turns []Turn
	var bad []string
	var cur *Turn
	userSince := false
	for i, m := range list(req["messages"]) {
		switch role := str(m, "role"); role {
		case "system", "developer":
		case "assistant":
			t := Turn{Role: "assistant"}
			json.Unmarshal(m["content"], &t.Text)
			for _, c := range list(m["tool_calls"]) {
				var fn obj
				json.Unmarshal(c["function"], &fn)
				var args string
				if err := json.Unmarshal(fn["arguments"], &args); err != nil {
					bad = append(bad, fmt.Sprintf("message %d: function.arguments is not a string", i))
				}
				t.Calls = append(t.Calls, WireCall{ID: str(c, "id"), Name: str(fn, "name"), Args: args})
			}
			turns = append(turns, t)
			cur, userSince = nil, false
		case "tool", "user":
			if cur == nil {
				turns = append(turns, Turn{Role: "user"})
				cur = &turns[len(turns)-1]
			}
			if role == "tool" {
				if userSince {
					bad = append(bad, fmt.Sprintf("message %d: a tool message follows a user message; tool messages must directly follow their assistant message", i))
				}
				r := WireResult{ID: str(m, "tool_call_id")}
				if err := json.Unmarshal(m["content"], &r.Text); err != nil {
					for _, p := range list(m["content"]) {
						if str(p, "type") == "image_url" {
							bad = append(bad, fmt.Sprintf("message %d: tool messages cannot carry images", i))
						}
						r.Text += str(p, "text")
					}
				}
				cur.Results = append(cur.Results, r)
				continue
			}
			userSince = true
			var s string
			if json.Unmarshal(m["content"], &s) == nil {
				cur.Text += s
				continue
			}
			for _, p := range list(m["content"]) {
				switch str(p, "type") {
				case "text":
					cur.Text += str(p, "text")
				case "image_url":
					cur.Images++
				}
			}
		default:
			bad = append(bad, fmt.Sprintf("message %d: unknown role %q", i, role))
		}
	}
	return turns, toolNames(req["tools"], "function"), bad
}

func parseResponses(req obj) ([]Turn, []string, []string) {
	var turns []Turn
	var bad []string
	var s string
	if json.Unmarshal(req["input"], &s) == nil {
		return []Turn{{Role: "user", Text: s}}, toolNames(req["tools"]), nil
	}
	turn := func(role string) *Turn {
		if len(turns) == 0 || turns[len(turns)-1].Role != role {
			turns = append(turns, Turn{Role: role})
		}
		return &turns[len(turns)-1]
	}
	for i, it := range list(req["input"]) {
		typ := str(it, "type")
		if typ == "" && str(it, "role") != "" {
			typ = "message"
		}
		switch typ {
		case "message":
			role := str(it, "role")
			if role != "assistant" {
				role = "user"
			}
			t := turn(role)
			var cs string
			if json.Unmarshal(it["content"], &cs) == nil {
				t.Text += cs
				continue
			}
			for _, p := range list(it["content"]) {
				switch str(p, "type") {
				case "input_text", "output_text":
					t.Text += str(p, "text")
				case "input_image":
					t.Images++
				}
			}
		case "function_call":
			t := turn("assistant")
			var args string
			if err := json.Unmarshal(it["arguments"], &args); err != nil {
				bad = append(bad, fmt.Sprintf("input %d: arguments is not a string", i))
			}
			t.Calls = append(t.Calls, WireCall{ID: str(it, "call_id"), Name: str(it, "name"), Args: args})
		case "function_call_output":
			t := turn("user")
			r := WireResult{ID: str(it, "call_id")}
			var out string
			if json.Unmarshal(it["output"], &out) == nil {
				r.Text = out
			} else {
				for _, p := range list(it["output"]) {
					switch str(p, "type") {
					case "input_text":
						r.Text += str(p, "text")
					case "input_image":
						if !strings.HasPrefix(str(p, "image_url"), "data:image/") {
							bad = append(bad, fmt.Sprintf("input %d: input_image without a data URL", i))
						}
						r.Images++
					}
				}
			}
			t.Results = append(t.Results, r)
		case "reasoning":
			turn("assistant")
		default:
			bad = append(bad, fmt.Sprintf("input %d: unknown item type %q", i, typ))
		}
	}
	return turns, toolNames(req["tools"]), bad
}

func parseGemini(req obj) ([]Turn, []string, []string) {
	var turns []Turn
	var bad []string
	for i, c := range list(req["contents"]) {
		t := Turn{Role: "user"}
		if str(c, "role") == "model" {
			t.Role = "assistant"
		}
		for _, p := range list(c["parts"]) {
			switch {
			case p["functionCall"] != nil:
				var fc obj
				json.Unmarshal(p["functionCall"], &fc)
				t.Calls = append(t.Calls, WireCall{ID: str(fc, "id"), Name: str(fc, "name"), Args: string(fc["args"]), Signature: str(p, "thoughtSignature")})
			case p["functionResponse"] != nil:
				var fr obj
				json.Unmarshal(p["functionResponse"], &fr)
				var resp obj
				json.Unmarshal(fr["response"], &resp)
				r := WireResult{ID: str(fr, "id"), Name: str(fr, "name"), Text: str(resp, "output")}
				if e := str(resp, "error"); e != "" {
					r.Text, r.IsError = e, true
				}
				t.Results = append(t.Results, r)
			case p["inlineData"] != nil:
				t.Images++
			case p["text"] != nil:
				t.Text += str(p, "text")
			}
		}
		// A call the fake made carries a signature; the API rejects
		// history that drops it.
		if t.Role == "assistant" {
			for _, call := range t.Calls {
				if call.Signature == "" {
					bad = append(bad, fmt.Sprintf("content %d: functionCall %s lost its thoughtSignature", i, call.Name))
				}
			}
		}
		turns = append(turns, t)
	}
	var names []string
	for _, tl := range list(req["tools"]) {
		names = append(names, toolNames(tl["functionDeclarations"])...)
	}
	return turns, names, bad
}

// respond encodes step n of the script in the API's response shape.
func respond(api API, n int, step Step) any {
	switch api {
	case Anthropic:
		var content []any
		if step.Text != "" {
			content = append(content, map[string]any{"type": "text", "text": step.Text})
		}
		for _, c := range step.Calls {
			b := map[string]any{"type": "tool_use", "name": c.Name, "input": argsValue(c.Args)}
			if c.ID != "" {
				b["id"] = c.ID
			}
			content = append(content, b)
		}
		stop := "end_turn"
		if len(step.Calls) > 0 {
			stop = "tool_use"
		}
		return map[string]any{"id": fmt.Sprintf("msg_fake_%d", n), "type": "message", "role": "assistant", "model": "fake",
			"content": content, "stop_reason": stop, "usage": map[string]int{"input_tokens": 10, "output_tokens": 10}}
	case OpenAI:
		msg := map[string]any{"role": "assistant", "content": nil}
		if step.Text != "" {
			msg["content"] = step.Text
		}
		var calls []any
		for _, c := range step.Calls {
			tc := map[string]any{"type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}}
			if c.ID != "" {
				tc["id"] = c.ID
			}
			calls = append(calls, tc)
		}
		finish := "stop"
		if len(calls) > 0 {
			msg["tool_calls"] = calls
			finish = "tool_calls"
		}
		return map[string]any{"id": fmt.Sprintf("chatcmpl-fake-%d", n), "object": "chat.completion", "model": "fake",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}}
	case Responses:
		out := []any{map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_fake_%d", n), "summary": []any{}}}
		if step.Text != "" {
			out = append(out, map[string]any{"type": "message", "id": fmt.Sprintf("msg_fake_%d", n), "role": "assistant", "status": "completed",
				"content": []any{map[string]any{"type": "output_text", "text": step.Text, "annotations": []any{}}}})
		}
		for i, c := range step.Calls {
			it := map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_fake_%d_%d", n, i), "name": c.Name, "arguments": c.Args, "status": "completed"}
			if c.ID != "" {
				it["call_id"] = c.ID
			}
			out = append(out, it)
		}
		return map[string]any{"id": fmt.Sprintf("resp_fake_%d", n), "object": "response", "status": "completed", "model": "fake", "output": out}
	default:
		var parts []any
		if step.Text != "" {
			parts = append(parts, map[string]any{"text": step.Text})
		}
		for i, c := range step.Calls {
			fc := map[string]any{"name": c.Name, "args": argsValue(c.Args)}
			if c.ID != "" {
				fc["id"] = c.ID
			}
			parts = append(parts, map[string]any{"functionCall": fc, "thoughtSignature": fmt.Sprintf("sig_%d_%d", n, i)})
		}
		return map[string]any{"candidates": []any{map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}},
			"modelVersion": "fake"}
	}
}

// argsValue is the arguments as the object-carrying APIs send them: the
// object when Args is JSON, else the text as a JSON string (a malformed
// call the client must survive).
func argsValue(args string) any {
	var v any
	if json.Unmarshal([]byte(args), &v) == nil {
		return v
	}
	return args
}
